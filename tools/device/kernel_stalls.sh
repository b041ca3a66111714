#!/usr/bin/env bash
# Where a kernel's warps wait: Nsight Compute stall reasons (per issued instruction),
# instruction counts and DRAM throughput of one launch per case, at the boost clock.
# Needs a CUDA build in $BUILD_DIR (default build-gpu/, made by tools/device/run_gpu_suite.sh; or a carried one).
# Usage: kernel_stalls.sh decode|prefill "NAME: bench options" ...
#   e.g. kernel_stalls.sh decode "gqa-b64: --batch 64 --seq-len 2048 --heads 32/8"
#        PAGEDATTN_PREFILL_TMA=0 kernel_stalls.sh prefill "a512: --new-tokens 512 --cached-tokens 8192"
# shellcheck source=tools/device/profile_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/profile_common.sh"
op=$1
shift
pick_op_kernel kernel_stalls.sh "$op"
reasons=(long_scoreboard short_scoreboard barrier membar mio_throttle lg_throttle math_pipe_throttle
         wait not_selected no_instruction dispatch_stall misc drain sleeping branch_resolving tex_throttle selected)
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active
for r in "${reasons[@]}"; do metrics+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
for spec in "$@"; do
  parse_spec "$spec"
  ncu --clock-control none --kernel-name regex:"$kernel" --launch-skip "$skip" --launch-count 1 --metrics "$metrics" \
    "$BUILD_DIR"/pagedattn bench "$op" --device cuda --iters 3 --warmup 1 "${opts[@]}" 2>&1 \
    | grep -E "^\s+(gpu__|dram__|smsp__|sm__)" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/ +/ /g'
done
