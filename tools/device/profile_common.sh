# shellcheck shell=bash
# Sourced by the tools/device profiling scripts: moves to the repository root, sets RESULTS_DIR
# (default $OUT, else bench/results/local) and reads their "NAME: bench options" arguments.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RESULTS_DIR=${RESULTS_DIR:-${OUT:-$PWD/bench/results/local}}
mkdir -p "$RESULTS_DIR"
# The CUDA build profiled: BUILD_DIR (default build-gpu/), or a build carried here by
# tools/device/pack_build.sh and unpack_build.sh, whose shared libraries are in carried-libs.
BUILD_DIR=${BUILD_DIR:-build-gpu}
if [[ -d $BUILD_DIR/carried-libs ]]; then
  export LD_LIBRARY_PATH="$PWD/$BUILD_DIR/carried-libs:${LD_LIBRARY_PATH:-}"
fi

# parse_spec "NAME: bench options": sets `name` and the array `opts`, and prints the case.
parse_spec() {
  name=${1%%:*}
  read -r -a opts <<<"${1#*:}"
  echo "==> $name: ${opts[*]}"
}
