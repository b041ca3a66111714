# shellcheck shell=bash
# Shared by scripts/demo.sh and scripts/test.sh (sourced, not run): installs the Debian/Ubuntu
# packages the build needs (only those missing, so repeated runs are fast), then configures and
# builds with CMake + Ninja. Works unattended (CI=true, no stdin).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Parallel build jobs; the default suits a small shared machine.
JOBS="${PAGEDATTN_JOBS:-2}"
# GPU architectures the scripts compile CUDA code for (when nvcc is present): Hopper only, to
# keep builds short (scripts/test.sh adds sm_80); a by-hand build defaults to sm_80, sm_89 and
# sm_90.
CUDA_ARCHS="${PAGEDATTN_CUDA_ARCHS:-90}"
PACKAGES=(build-essential cmake ninja-build libhwy-dev libcli11-dev nlohmann-json3-dev
          libfmt-dev libgtest-dev googletest libdlpack-dev)

log() { printf '\n==> %s\n' "$*"; }

ensure_packages() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  if ! command -v apt-get >/dev/null; then
    echo "missing packages (${missing[*]}) and no apt-get: install them by hand" >&2
    exit 1
  fi
  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    sudo=(sudo -n)
  fi
  log "installing ${missing[*]}"
  "${sudo[@]}" apt-get update -q </dev/null
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}" </dev/null
}

# configure DIR [cmake args...]: a Ninja build tree in DIR (the generator is chosen only when DIR
# is new, so an existing tree is reused as it is).
configure() {
  local dir="$1"
  shift
  local generator=()
  if [[ ! -f "$dir/CMakeCache.txt" ]]; then
    generator=(-G Ninja)
  fi
  log "configuring $dir"
  cmake -S "$ROOT" -B "$dir" "${generator[@]}" "$@"
}

# build DIR [targets...]
build() {
  local dir="$1"
  shift
  local targets=()
  if (($# > 0)); then
    targets=(--target "$@")
  fi
  log "building $dir (-j$JOBS)"
  cmake --build "$dir" -j "$JOBS" "${targets[@]}"
}
