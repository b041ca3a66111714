#!/usr/bin/env bash
# Where the decode kernels' warps wait: Nsight Compute stall reasons (per issued instruction),
# instruction counts and DRAM throughput of one decode launch per shape, at the boost clock.
# Needs build-gpu/ (tools/device/run_gpu_suite.sh). Usage: decode_stalls.sh "NAME: bench options" ...
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
reasons=(long_scoreboard short_scoreboard barrier membar mio_throttle lg_throttle math_pipe_throttle
         wait not_selected no_instruction dispatch_stall misc drain sleeping branch_resolving tex_throttle selected)
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__warps_active.avg.per_cycle_active,smsp__issue_active.avg.per_cycle_active
for r in "${reasons[@]}"; do metrics+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
for spec in "$@"; do
  name=${spec%%:*}
  read -r -a opts <<<"${spec#*:}"
  echo "==> $name: ${opts[*]}"
  ncu --clock-control none --kernel-name regex:'paged_decode' --launch-skip 2 --launch-count 1 --metrics "$metrics" \
    build-gpu/pagedattn bench decode --device cuda --iters 3 --warmup 1 "${opts[@]}" 2>&1 \
    | grep -E "^\s+(gpu__|dram__|smsp__|sm__)" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/ +/ /g'
done
