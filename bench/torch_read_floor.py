#!/usr/bin/env python3
"""Size-matched streaming floors for the decode shapes of BENCHMARKS.md: how close a plain,
contiguous, one-launch stream of exactly a shape's valid K/V bytes gets to the copy ceiling.
A decode kernel reads those bytes once (paged, then merges splits); a row reduction over a
contiguous buffer of the same size (PyTorch's sum over rows of 4096 bf16, f32 accumulation)
does nothing else, so its ratio is what "reading every byte once" costs at that size in one
launch, ramp and tail included. The copy of half the bytes (read + write = the shape's bytes)
is given too. Prints one JSON record per (shape, heads, floor) in the benchmark contract.

Usage: python3 bench/torch_read_floor.py [--iters 50] [--head-dim 128] [--kv-heads 8,32] [--out FILE]
"""
import argparse
import json

import torch

from torch_bench import time_us, write_records
from torch_sdpa_decode import SHAPES, copy_ceiling_gbps, ragged_lens

ROW = 4096  # bf16 elements per reduced row (8 KiB): rows of the reduction, not of the cache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--kv-heads", default="8,32", help="KV head counts (32 query heads each)")
    ap.add_argument("--out")
    args = ap.parse_args()
    device = torch.cuda.get_device_name()
    ceiling = copy_ceiling_gbps()
    records = []
    for hkv in (int(h) for h in args.kv_heads.split(",")):
        for name, lens in SHAPES + [("d-ragged", ragged_lens())]:
            nbytes = 2 * sum(lens) * hkv * args.head_dim * 2  # K and V, bf16
            rows = (nbytes // 2 + ROW - 1) // ROW
            x = torch.randn(rows, ROW, device="cuda", dtype=torch.bfloat16)
            sums = torch.empty(rows, device="cuda", dtype=torch.float32)
            half = torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8)
            half_dst = torch.empty_like(half)
            floors = {"row_sum": (lambda: torch.sum(x, dim=1, dtype=torch.float32, out=sums), rows * ROW * 2),
                      "copy_half": (lambda: half_dst.copy_(half), 2 * half.numel())}
            for floor, (fn, moved) in floors.items():
                med, mn = time_us(fn, args.iters)
                gbps = moved / (med * 1e-6) / 1e9
                rec = {"op": "read_floor", "backend": "torch_" + floor, "device": device, "dtype": "bf16",
                       "layout": "contiguous", "num_q_heads": 32, "num_kv_heads": hkv, "head_dim": args.head_dim,
                       "batch": len(lens), "shape": name, "bytes": moved, "time_us_median": med,
                       "time_us_min": mn, "achieved_gbps": gbps, "ceiling_gbps": ceiling,
                       "ratio_to_ceiling": gbps / ceiling}
                records.append(rec)
                print(json.dumps(rec), flush=True)
            del x, sums, half, half_dst
            torch.cuda.empty_cache()
    if args.out:
        write_records(args.out, records)


if __name__ == "__main__":
    main()
