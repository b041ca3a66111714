#!/usr/bin/env bash
# Runs a command while nvidia-smi samples the GPU's SM clock, power draw and throttle reasons
# every 20 ms, then prints their distribution over the samples taken while the GPU was busy
# (utilization > 0). Tells whether a kernel runs at the boost clock or is held by the power
# limit, which decides between latency and energy as the thing to cut.
# Usage: tools/device/with_clocks.sh LABEL OUTDIR -- command [args...]
set -uo pipefail
label=$1 outdir=$2
shift 2
[[ ${1:-} == "--" ]] && shift
mkdir -p "$outdir"
samples="$outdir/clocks-$label.csv"
nvidia-smi --query-gpu=timestamp,utilization.gpu,clocks.sm,power.draw,clocks_throttle_reasons.active \
  --format=csv,noheader,nounits -lms 20 >"$samples" 2>/dev/null &
sampler=$!
"$@"
status=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
python3 - "$samples" "$label" <<'EOF'
import statistics, sys
rows = [r.split(", ") for r in open(sys.argv[1]).read().splitlines() if r.count(",") >= 4]
busy = [r for r in rows if r[1].strip().isdigit() and int(r[1]) > 0]
if not busy:
    print(f"{sys.argv[2]}: no busy samples ({len(rows)} in all)")
    sys.exit(0)
clk = sorted(float(r[2]) for r in busy)
pwr = sorted(float(r[3]) for r in busy)
reasons = {}
for r in busy:
    reasons[r[4].strip()] = reasons.get(r[4].strip(), 0) + 1
q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]
print(f"{sys.argv[2]}: {len(busy)} busy samples; SM clock MHz p10/p50/p90 {q(clk, .1):.0f}/{q(clk, .5):.0f}/{q(clk, .9):.0f}; "
      f"power W p10/p50/p90 {q(pwr, .1):.0f}/{q(pwr, .5):.0f}/{q(pwr, .9):.0f}; throttle reasons {reasons}")
EOF
exit $status
