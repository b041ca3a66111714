#!/usr/bin/env python3
"""Summarises Nsight Compute's per-SASS-instruction source page (`ncu -i R --page source
--print-source sass --csv`): the opcodes weighted by how often they executed (warp-level), and
the instructions with the most warp-stall samples, so that a kernel's instruction budget per
tile and its waits can be read without the GUI. Usage: sass_hotspots.py FILE.csv [TOP]"""
import csv
import collections
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def column(header, *needles):
    """The first column whose name contains every needle (case-insensitive), or None."""
    for i, name in enumerate(header):
        if all(n.lower() in name.lower() for n in needles):
            return i
    return None


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    rows = [r for r in csv.reader(open(path, newline="")) if r]
    start = next((i for i, r in enumerate(rows) if column(r, "source") is not None and len(r) > 3), None)
    if start is None:
        sys.exit(f"{path}: no source table found")
    header, body = rows[start], rows[start + 1:]
    src = column(header, "source")
    executed = column(header, "instructions executed")
    stalls = column(header, "warp stall sampling (all")
    address = column(header, "address")
    if executed is None or stalls is None:
        sys.exit(f"{path}: columns not found in {header}")
    total_exec = sum(number(r[executed]) for r in body if len(r) > executed)
    total_stall = sum(number(r[stalls]) for r in body if len(r) > stalls)
    by_op = collections.Counter()
    for r in body:
        if len(r) <= max(src, executed):
            continue
        text = r[src].strip()
        op = text.split()[0] if text else "?"
        if op.startswith("@"):  # a predicate guard: the opcode follows it
            parts = text.split()
            op = parts[1] if len(parts) > 1 else op
        by_op[op.split(".")[0]] += number(r[executed])
    print(f"  {len(body)} SASS instructions, {total_exec:.0f} warp-level executions, {total_stall:.0f} stall samples")
    print("  opcodes by executions:")
    for op, n in by_op.most_common(25):
        print(f"    {op:12s} {n:12.0f}  {100 * n / max(total_exec, 1):5.1f}%")
    print(f"  the {top} instructions with the most stall samples:")
    ranked = sorted(body, key=lambda r: -number(r[stalls]) if len(r) > stalls else 0)
    for r in ranked[:top]:
        where = r[address] if address is not None and len(r) > address else ""
        print(f"    {where:>8s} {number(r[stalls]):8.0f} ({100 * number(r[stalls]) / max(total_stall, 1):4.1f}%)"
              f"  exec {number(r[executed]):10.0f}  {r[src].strip()[:90]}")


if __name__ == "__main__":
    main()
