#!/usr/bin/env bash
# Times one benchmark command under several environment settings, interleaved round by round
# (A B A B ...), so that device drift between calls falls on every setting alike. Every JSON
# record the command prints gets "setting" and "round" fields; the records go to OUTFILE and a
# per-setting summary (tools/device/ab_summary.py) is printed at the end.
# Usage: ab_switch.sh ROUNDS OUTFILE "LABEL[:VAR=VALUE ...]" ... -- COMMAND [ARGS...]
#   e.g. ab_switch.sh 3 $OUT/ab.json "4d:PAGEDATTN_DECODE_WHOLE_ROWS=0" "5d" -- \
#          build-gpu/pagedattn bench decode --device cuda --standard-shapes --json
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rounds=$1 outfile=$2
shift 2
settings=()
while (($# > 0)) && [[ $1 != "--" ]]; do settings+=("$1"); shift; done
[[ ${1:-} == "--" ]] || { echo "ab_switch.sh: expected -- before the command" >&2; exit 2; }
shift
((${#settings[@]} > 0 && $# > 0)) || { echo "ab_switch.sh: need settings and a command" >&2; exit 2; }
: >"$outfile"
status=0
for ((round = 0; round < rounds; ++round)); do
  for setting in "${settings[@]}"; do
    label=${setting%%:*}
    assignments=()
    [[ $setting == *:* ]] && read -r -a assignments <<<"${setting#*:}"
    env "${assignments[@]}" "$@" | python3 -c '
import json, sys
label, rnd = sys.argv[1], int(sys.argv[2])
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line); r["setting"] = label; r["round"] = rnd; print(json.dumps(r))
' "$label" "$round" >>"$outfile" || status=1
  done
done
python3 "$here/ab_summary.py" "$outfile"
exit $status
