#!/usr/bin/env python3
"""Markdown table of pagedattn's CUDA records beside the competitor records of the same run:
results_table.py PAGEDATTN_JSON COMPETITOR_JSON [FLOOR_JSON [PAGED_FLOOR_JSON]]. The files hold one
JSON object a line.
Decode records are rated in GB/s against the copy ceiling, prefill / append records in
TFLOP/s against the matmul ceiling, cascade records by the distinct KV bytes against the copy
ceiling and by their speed-up over plain decode (no competitor file). Decode tables take an
optional third file, bench/torch_read_floor.py's records: the faster of two contiguous
one-launch streams of the shape's bytes (a row reduction, a copy), as a percentage of the same
copy ceiling. A fourth file, bench/cuda_paged_read_probe's records, adds the paged floor: the same
bytes read through shuffled pages by a kernel that does nothing else (its fastest record of
shuffled pages per shape), rated against the ceiling its own run measured.
The competitor file may hold contiguous-cache records (PyTorch SDPA, layout "contiguous") and
paged ones (FlashInfer's paged decode, bench/flashinfer_decode.py): each kind gets its own
"fastest" columns, the paged one per KV dtype too, since a paged competitor reads the same
cache as pagedattn (fp8 included) where SDPA reads a bf16 copy without a page table."""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ours, theirs = load(sys.argv[1]), load(sys.argv[2]) if len(sys.argv) > 2 else []
    # The fastest of the simple streams per shape (their speeds move between shapes).
    floors = fastest_per_shape(load(sys.argv[3]) if len(sys.argv) > 3 else [])
    paged_floors = fastest_per_shape(r for r in (load(sys.argv[4]) if len(sys.argv) > 4 else [])
                                     if r.get("access") == "paged" and r.get("order") == "shuffled")
    if ours and "achieved_tflops" in ours[0]:
        return compute_table(ours, theirs)
    if ours and ours[0]["op"] == "cascade":
        return cascade_table(ours)
    # Interleaved rounds (the suite's DECODE_ROUNDS): one row per case, the medians over rounds.
    mine = median_rounds(ours, lambda r: (r["shape"], r["num_q_heads"], r["num_kv_heads"], r["kv_dtype"],
                                          r["page_size"], r.get("layout", "nhd")))
    theirs_rounds = median_rounds(theirs, lambda r: (r["shape"], r["num_q_heads"], r["num_kv_heads"],
                                                      r.get("kv_dtype", "bf16"), r["backend"])).values()
    best = fastest_by(lambda r: (r["shape"], r["num_q_heads"], r["num_kv_heads"]),
                      (r for r in theirs_rounds if r.get("layout") == "contiguous"))
    best_paged = fastest_by(lambda r: (r["shape"], r["num_q_heads"], r["num_kv_heads"], r.get("kv_dtype", "bf16")),
                            (r for r in theirs_rounds if r.get("layout", "contiguous") != "contiguous"))
    rounds = max([r["rounds"] for r in mine.values()] + [1])
    print(f"Device: {ours[0]['device']}; copy ceiling {ours[0]['ceiling_gbps']:.0f} GB/s"
          + (f" (first round); medians of {rounds} interleaved rounds, each rated against its own round's ceiling"
             if rounds > 1 else "") if ours else "")
    print()
    floor_head = (" stream floor % |" if floors else "") + (" paged floor % |" if paged_floors else "")
    paged_head = " fastest paged | its µs | speed-up |" if best_paged else ""
    print("| shape | heads q/kv | kv dtype | page | time µs (median) | GB/s | % of copy ceiling | fastest SDPA | SDPA µs | speed-up |"
          + paged_head + floor_head)
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if best_paged else "")
          + ("---|" if floors else "") + ("---|" if paged_floors else ""))
    for r in mine.values():
        key = (r["shape"], r["num_q_heads"], r["num_kv_heads"])
        comp = best.get(key) if r["kv_dtype"] == "bf16" and r["page_size"] == 16 else None
        # A paged competitor runs pages of 16 (BENCHMARKS.md's): compared at that page size only.
        paged = best_paged.get(key + (r["kv_dtype"],)) if r["page_size"] == 16 else None
        print(f"| {r['shape']} | {r['num_q_heads']}/{r['num_kv_heads']} | {r['kv_dtype']} | {r['page_size']} | "
              f"{r['time_us_median']:.1f} | {r['achieved_gbps']:.0f} | {100 * r['ratio_to_ceiling']:.1f} | "
              f"{competitor_cells(comp, r)} |" + (f" {competitor_cells(paged, r)} |" if best_paged else "")
              + (floor_cell(floors.get((r["shape"], r["num_kv_heads"])), r) if floors else "")
              + (floor_cell(paged_floors.get((r["shape"], r["num_kv_heads"])), r) if paged_floors else ""))
    print_time_ratios(mine.values())


def print_time_ratios(rows):
    """The decode table's own comparisons on d-b64 (GQA 32/8): fp8 KV and other page sizes
    against bf16 at page 16, from the medians."""
    rows = [r for r in rows if r["shape"] == "d-b64" and r["num_kv_heads"] == 8]
    base = next((r for r in rows if r["kv_dtype"] == "bf16" and r["page_size"] == 16), None)
    if base is None:
        return
    lines = [f"- {r['kv_dtype']} page {r['page_size']}: {r['time_us_median'] / base['time_us_median']:.3f}x"
             for r in rows if r is not base]
    if lines:
        print()
        print("d-b64 (GQA 32/8) time against bf16 at page 16:")
        print("\n".join(lines))


def fastest_by(key, records):
    """The fastest record (median time) per key."""
    best = {}
    for r in records:
        if key(r) not in best or r["time_us_median"] < best[key(r)]["time_us_median"]:
            best[key(r)] = r
    return best


def competitor_cells(comp, r):
    """Backend, time and our speed-up over it (its time / ours), or dashes without a record."""
    if comp is None:
        return "- | - | -"
    return f"{comp['backend']} | {comp['time_us_median']:.1f} | {comp['time_us_median'] / r['time_us_median']:.2f}x"


def fastest_per_shape(records):
    """The record of the highest ratio to the ceiling per (shape, KV heads)."""
    best = {}
    for r in records:
        key = (r["shape"], r["num_kv_heads"])
        if "ratio_to_ceiling" in r and (key not in best or r["ratio_to_ceiling"] > best[key]["ratio_to_ceiling"]):
            best[key] = r
    return best


def floor_cell(floor, r):
    """A bf16 page-16 shape's floor as a percentage of the copy ceiling its own run measured."""
    if floor is None or r["kv_dtype"] != "bf16" or r["page_size"] != 16:
        return " - |"
    return f" {100 * floor['ratio_to_ceiling']:.1f} |"


def median_rounds(records, key):
    """One record per key, in the order of first appearance, with its time and rates the medians
    over that key's records (the suite times decode and prefill in interleaved rounds: the
    competitors' times move with the GPU's thermal state from round to round) and the number of
    rounds it stands for."""
    groups = {}
    for r in records:
        if "time_us_median" in r:
            groups.setdefault(key(r), []).append(r)
    out = {}
    for k, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["time_us_median"])
        row = dict(rs[(len(rs) - 1) // 2], rounds=len(rs))
        # The medians over rounds (of an even count, the mean of the middle two): the time, and
        # each round's rate against its own round's ceiling (ceilings move between rounds too).
        for field in ("time_us_median", "ratio_to_ceiling", "achieved_gbps", "achieved_tflops"):
            if all(field in r for r in rs):
                row[field] = statistics.median(r[field] for r in rs)
        out[k] = row
    return out


def compute_table(ours, theirs):
    mine = median_rounds(ours, lambda r: (r["shape"], r["page_size"], r.get("kv_dtype", "bf16")))
    best = fastest_by(lambda r: r["shape"], median_rounds(theirs, lambda r: (r["shape"], r["backend"])).values())
    rounds = max([r["rounds"] for r in mine.values()] + [1])
    print(f"Device: {ours[0]['device']}; bf16 matmul ceiling {ours[0]['ceiling_tflops']:.0f} TFLOP/s"
          + (f"; medians of {rounds} interleaved rounds" if rounds > 1 else ""))
    print()
    print("| shape | op | kv dtype | page | time µs (median) | TFLOP/s | % of matmul ceiling | fastest competitor | its µs | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in mine.values():
        kv = r.get("kv_dtype", "bf16")  # records before fp8 prefill rows had none
        comp = best.get(r["shape"]) if kv == "bf16" else None
        comp_cols = (f"{comp['backend']} | {comp['time_us_median']:.1f} | {comp['time_us_median'] / r['time_us_median']:.2f}x"
                     if comp else "- | - | -")
        print(f"| {r['shape']} | {r['op']} | {kv} | {r['page_size']} | {r['time_us_median']:.1f} | "
              f"{r['achieved_tflops']:.1f} | {100 * r['ratio_to_ceiling']:.1f} | {comp_cols} |")


def cascade_table(ours):
    r0 = ours[0]
    print(f"Device: {r0['device']}; copy ceiling {r0['ceiling_gbps']:.0f} GB/s; {r0['seq_lens_desc']}, "
          f"heads {r0['num_q_heads']}/{r0['num_kv_heads']}, page {r0['page_size']}, {r0['cascade_levels']} shared level(s)")
    print()
    print("| variant | time µs (median) | min µs | distinct bytes GB/s | % of copy ceiling | speed-up vs plain | host µs per call | of which search |")
    print("|---|---|---|---|---|---|---|---|")
    for r in ours:
        host = f"{r['host_us_median']:.0f}" if "host_us_median" in r else "-"
        search = f"{r['search_us_median']:.0f}" if "search_us_median" in r else "-"
        print(f"| {r['variant']} | {r['time_us_median']:.1f} | {r['time_us_min']:.1f} | {r['achieved_gbps']:.0f} | "
              f"{100 * r['ratio_to_ceiling']:.1f} | {r['speedup_vs_plain']:.2f}x | {host} | {search} |")


if __name__ == "__main__":
    main()
