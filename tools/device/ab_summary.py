#!/usr/bin/env python3
"""Summary of tools/device/ab_switch.sh records: ab_summary.py FILE. One row per benchmark case
(shape, heads, head dim, layout, q and KV dtypes, page size, variant, partition) and one column per
setting: the range of the per-round medians in microseconds, then the ratio of the medians of
those to the first setting's, then [the median of the per-round ratios to the first setting].
The per-round ratio pairs runs taken minutes apart at most, so on a machine whose speed drifts
(a shared VM) it is the figure to read."""
import json
import statistics
import sys
from collections import defaultdict


def case_of(r):
    keys = ("op", "shape", "num_q_heads", "num_kv_heads", "head_dim", "layout", "dtype", "kv_dtype",
            "page_size", "variant", "partition_size")
    return " ".join(str(r[k]) for k in keys if k in r)


def main():
    records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    settings, cases = [], []
    times = defaultdict(list)
    by_round = defaultdict(dict)  # (case, setting) -> {round: time}
    for r in records:
        if "time_us_median" not in r:
            continue
        s, c = r["setting"], case_of(r)
        if s not in settings:
            settings.append(s)
        if c not in cases:
            cases.append(c)
        times[(c, s)].append(r["time_us_median"])
        by_round[(c, s)][r.get("round", len(by_round[(c, s)]))] = r["time_us_median"]
    print("| case | " + " | ".join(settings) + " |")
    print("|---" * (len(settings) + 1) + "|")
    for c in cases:
        base = times.get((c, settings[0]))
        cols = []
        for s in settings:
            t = times.get((c, s))
            if not t:
                cols.append("-")
                continue
            ratio = f" ({statistics.median(t) / statistics.median(base):.3f})" if base and s != settings[0] else ""
            first, mine = by_round[(c, settings[0])], by_round[(c, s)]
            paired = [mine[k] / first[k] for k in mine if k in first and first[k] > 0]
            if s != settings[0] and paired:
                ratio += f" [{statistics.median(paired):.3f}]"
            cols.append(f"{min(t):.1f}-{max(t):.1f}{ratio}")
        print(f"| {c} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
