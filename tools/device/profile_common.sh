# shellcheck shell=bash
# Sourced by the tools/device profiling scripts: moves to the repository root, sets RESULTS_DIR
# (default $OUT, else bench/results/local) and reads their "NAME: bench options" arguments.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
RESULTS_DIR=${RESULTS_DIR:-${OUT:-$PWD/bench/results/local}}
mkdir -p "$RESULTS_DIR"
# The CUDA build profiled: BUILD_DIR (default build-gpu/), or a carried one.
# shellcheck source=tools/device/build_dir.sh
source tools/device/build_dir.sh

# parse_spec "NAME: bench options": sets `name` and the array `opts`, and prints the case.
parse_spec() {
  name=${1%%:*}
  read -r -a opts <<<"${1#*:}"
  echo "==> $name: ${opts[*]}"
}

# pick_op_kernel SCRIPT OP: for `decode` or `prefill`, sets `kernel` (the ncu name regex of its
# kernel) and `skip` (launches before the one profiled: the warm-up's); any other OP ends SCRIPT.
pick_op_kernel() {
  case $2 in
    decode) kernel=paged_decode skip=2 ;;
    prefill) kernel=paged_prefill skip=1 ;;
    *) echo "$1: the first argument is decode or prefill" >&2; exit 2 ;;
  esac
}
