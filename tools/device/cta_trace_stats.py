#!/usr/bin/env python3
"""Summaries of per-CTA timestamp traces: cta_trace_stats.py TRACE...

A trace (written by the instrumentation in docs/experiments/decode-cta-trace-s40.patch, for the
decode kernel and for bench/cuda_paged_read_probe) is a line "grid X Y Z" and then one line per
CTA: entry, first tile ready (warp 0), loop end (warp 0), exit (globaltimer ns), SM id, tokens.
Prints, in us from the earliest entry, the spread of each phase over the CTAs, the SMs' last
exits, and each CTA's tokens per us between its first tile and its loop end."""
import sys


def spread(values):
    v = sorted(values)
    n = len(v)
    return f"min {v[0]:.1f} p10 {v[n // 10]:.1f} med {v[n // 2]:.1f} p90 {v[9 * n // 10]:.1f} max {v[-1]:.1f}"


def summarise(path):
    lines = open(path).read().split("\n")
    rows = [list(map(int, line.split())) for line in lines[1:] if line.strip()]
    rows = [r for r in rows if r[0] > 0]
    t0 = min(r[0] for r in rows)
    us = lambda ns: ns / 1000.0
    started = [r for r in rows if r[1] > 0]
    sm_end, sm_ctas = {}, {}
    for r in rows:
        sm_end[r[4]] = max(sm_end.get(r[4], 0.0), us(r[3] - t0))
        sm_ctas[r[4]] = sm_ctas.get(r[4], 0) + 1
    print(f"== {path}: {lines[0]}, {len(rows)} CTAs on {len(sm_end)} SMs, span {max(sm_end.values()):.1f} us")
    print("  entry     ", spread([us(r[0] - t0) for r in rows]))
    print("  to tile 1 ", spread([us(r[1] - r[0]) for r in started]))
    print("  loop      ", spread([us(r[2] - r[1]) for r in started]))
    print("  epilogue  ", spread([us(r[3] - r[2]) for r in rows]))
    print("  exit      ", spread([us(r[3] - t0) for r in rows]))
    print("  SM end    ", spread(list(sm_end.values())))
    print("  tokens/us ", spread([r[5] / us(r[2] - r[1]) for r in started if r[2] > r[1]]))
    print("  CTAs per SM", sorted(set(sm_ctas.values())))


if __name__ == "__main__":
    for trace in sys.argv[1:]:
        summarise(trace)
