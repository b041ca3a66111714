#!/usr/bin/env bash
# Nsight Compute over chosen decode shapes: per-kernel durations, DRAM rates and L2 sector
# lookups per DRAM sector of every decode/merge launch, and the throughput, occupancy and
# warp-stall sections of the decode kernel, written to RESULTS_DIR (default $OUT, else
# bench/results/local). Needs a CUDA build in $BUILD_DIR
# (default build-gpu/, which tools/device/run_gpu_suite.sh makes; or a carried one).
# Usage: tools/device/profile_decode.sh "NAME: bench options" ...
#   e.g. tools/device/profile_decode.sh "gqa-b64: --batch 64 --seq-len 2048 --heads 32/8"
# shellcheck source=tools/device/profile_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/profile_common.sh"
for spec in "$@"; do
  parse_spec "$spec"
  bench=("$BUILD_DIR"/pagedattn bench decode --device cuda --iters 3 --warmup 1 "${opts[@]}")
  # L2 sector lookups per DRAM sector read, and L2's hit rate on data read once: a decode that
  # asks L2 for more than it reads (v47: the tensor maps' 256-byte promotion) shows here first.
  ncu --kernel-name regex:'decode|merge' \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum.per_second,lts__t_sectors.sum,dram__sectors_read.sum,lts__t_sector_hit_rate.pct \
    --csv "${bench[@]}" >"$RESULTS_DIR/ncu-$name-times.csv" 2>"$RESULTS_DIR/ncu-$name-times.err"
  python3 - "$RESULTS_DIR/ncu-$name-times.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("  no kernels profiled"); sys.exit()
head = rows[0]; k = head.index("Kernel Name"); m = head.index("Metric Name"); v = head.index("Metric Value"); u = head.index("Metric Unit")
agg = collections.defaultdict(list)
for r in rows[1:]: agg[(r[k][:60], r[m], r[u])].append(float(r[v].replace(",", "")))
med = {}
for (kn, mn, un), vals in sorted(agg.items()):
  vals.sort(); med[(kn, mn)] = vals[len(vals)//2]
  print(f"  {kn:60s} {mn:40s} median {med[(kn, mn)]:.1f} {un} (n={len(vals)})")
for (kn, mn), v in med.items():
  if mn == "lts__t_sectors.sum" and med.get((kn, "dram__sectors_read.sum")):
    print(f"  {kn:60s} L2 sector lookups per DRAM sector read: {v / med[(kn, 'dram__sectors_read.sum')]:.2f}")
PY
  ncu --kernel-name regex:'paged_decode' --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats \
    "${bench[@]}" >"$RESULTS_DIR/ncu-$name-sections.txt" 2>&1
  grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|Block Limit" \
    "$RESULTS_DIR/ncu-$name-sections.txt" | head -30
done
