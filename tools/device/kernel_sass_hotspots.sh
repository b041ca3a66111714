#!/usr/bin/env bash
# Which SASS instructions of one decode or prefill launch execute most and where its warps stall:
# Nsight Compute's source counters (executed instructions and warp-stall samples per SASS
# instruction) of one launch per case, at the boost clock, summarised by
# tools/device/sass_hotspots.py (opcode histogram weighted by executions, the most-stalled
# instructions); the raw per-instruction CSV stays in RESULTS_DIR.
# Needs a CUDA build in $BUILD_DIR (default build-gpu/, or a carried one).
# Usage: kernel_sass_hotspots.sh decode|prefill "NAME: bench options" ...
#   e.g. kernel_sass_hotspots.sh decode "fp8-b64: --batch 64 --seq-len 2048 --kv-dtype fp8_e4m3"
# shellcheck source=tools/device/profile_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/profile_common.sh"
op=$1
shift
pick_op_kernel kernel_sass_hotspots.sh "$op"
for spec in "$@"; do
  parse_spec "$spec"
  report="$RESULTS_DIR/sass-$name"
  ncu --clock-control none --kernel-name regex:"$kernel" --launch-skip "$skip" --launch-count 1 \
    --section SourceCounters --section WarpStateStats -f -o "$report" \
    "$BUILD_DIR"/pagedattn bench "$op" --device cuda --iters 3 --warmup 1 "${opts[@]}" >"$report.log" 2>&1 ||
    { tail -5 "$report.log"; continue; }
  ncu -i "$report.ncu-rep" --page source --print-source sass --csv >"$report.csv" 2>"$report.err" ||
    { tail -5 "$report.err"; continue; }
  python3 tools/device/sass_hotspots.py "$report.csv"
done
