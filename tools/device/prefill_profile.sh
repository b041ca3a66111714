#!/usr/bin/env bash
# Nsight Compute over one launch of the Hopper prefill kernel per case: speed of light, warp
# states, memory and instruction statistics (full text in RESULTS_DIR/ncu-prefill-NAME.txt, a
# summary printed). Needs a CUDA build in $BUILD_DIR
# (default build-gpu/, which tools/device/run_gpu_suite.sh makes; or a carried one).
# Usage: prefill_profile.sh "NAME: bench options" ...
#   e.g. prefill_profile.sh "a512-p1: --batch 8 --new-tokens 512 --cached-tokens 8192 --page-size 1"
# shellcheck source=tools/device/profile_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/profile_common.sh"
for spec in "$@"; do
  parse_spec "$spec"
  ncu --kernel-name regex:'paged_prefill_wgmma' --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats \
    "$BUILD_DIR"/pagedattn bench prefill --device cuda --iters 2 --warmup 1 "${opts[@]}" \
    >"$RESULTS_DIR/ncu-prefill-$name.txt" 2>&1
  grep -E "Duration|Elapsed Cycles|Executed Ipc Active|Issue Slots Busy|Memory Throughput|L1/TEX Hit|L2 Hit|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Warp Cycles Per Issued|Executed Instructions  |Avg. Active Threads|Mem Busy|Max Bandwidth|Mem Pipes Busy" \
    "$RESULTS_DIR/ncu-prefill-$name.txt" | sed -E 's/ +/ /g'
done
