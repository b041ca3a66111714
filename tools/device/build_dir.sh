# shellcheck shell=bash
# Sourced by run_gpu_suite.sh and the profiling scripts, from the repository root: BUILD_DIR, the
# CUDA build they use (default build-gpu/), and for a build carried here by pack_build.sh and
# unpack_build.sh its shared libraries (BUILD_DIR/carried-libs) on LD_LIBRARY_PATH.
BUILD_DIR=${BUILD_DIR:-build-gpu}
if [[ -d $BUILD_DIR/carried-libs ]]; then
  export LD_LIBRARY_PATH="$(cd "$BUILD_DIR/carried-libs" && pwd):${LD_LIBRARY_PATH:-}"
fi
