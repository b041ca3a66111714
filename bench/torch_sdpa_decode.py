#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention (cuDNN and flash backends) on the decode shapes
of BENCHMARKS.md with a contiguous (non-paged) KV cache: what a user would pick instead of a
paged kernel. Prints one JSON record per (shape, heads, backend) in the benchmark contract.

Usage: python3 bench/torch_sdpa_decode.py [--iters 50] [--head-dim 128] [--kv-heads 8,32]
                                           [--shapes BxL,...] [--launch calls|graph] [--out FILE]

--launch calls (the default) times each eager call between two events; graph captures each
case once in a CUDA graph and times its replays, as `pagedattn bench decode` does by default
(its --launch calls matches the eager timing).
"""
import argparse
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_bench import decode_bytes, error_record, graph_replay, ragged_lengths, rate_record, time_us, write_records

SHAPES = [("d-long1", [32768]), ("d-mid16", [4096] * 16), ("d-b64", [2048] * 64),
          ("d-b256", [1024] * 256), ("d-b32-16k", [16384] * 32)]
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def ragged_lens():
    # d-ragged's 128 lengths, the C++ benchmark's own; SDPA times them padded to the longest (a
    # padded batch is what SDPA users run for ragged decode), its rate counting the valid bytes.
    return ragged_lengths(128, 8192, 2024)


def custom_shapes(text):
    shapes = []
    for item in text.split(","):
        batch, length = (int(x) for x in item.lower().split("x"))
        if batch < 1 or length < 1:
            raise SystemExit(f"--shapes: {item!r} needs a positive batch and length")
        shapes.append((f"{batch}x{length}", [length] * batch))
    return shapes


def copy_ceiling_gbps():
    n = 2 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    med, _ = time_us(lambda: dst.copy_(src), 10)
    return 2 * n / (med * 1e-6) / 1e9


def add_decode_args(ap, head_dim_help="head dimension (BENCHMARKS.md's shapes: 128)"):
    """The options every decode competitor script takes: iterations, head_dim, KV heads, shapes,
    launch mode and output file."""
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--head-dim", type=int, default=128, help=head_dim_help)
    ap.add_argument("--kv-heads", default="8,32", help="KV head counts to time, 32 query heads each")
    ap.add_argument("--shapes", help="comma-separated BATCHxLENGTH shapes (e.g. 66x2048) instead of "
                                     "BENCHMARKS.md's table")
    ap.add_argument("--launch", choices=("calls", "graph"), default="calls",
                    help="calls: eager calls between events; graph: replays of a captured CUDA graph")
    ap.add_argument("--out")


def decode_shapes(args):
    """(name, lengths) of each shape to time: --shapes, or BENCHMARKS.md's table with d-ragged."""
    return custom_shapes(args.shapes) if args.shapes else SHAPES + [("d-ragged", ragged_lens())]


def start_decode_run(args):
    """Seeds PyTorch's generator and measures the copy ceiling: (device name, ceiling GB/s, cases),
    each case a (KV heads, shape name, lengths) to time, in order."""
    torch.manual_seed(0)
    cases = [(hkv, name, lens) for hkv in (int(h) for h in args.kv_heads.split(","))
             for name, lens in decode_shapes(args)]
    return torch.cuda.get_device_name(), copy_ceiling_gbps(), cases


def main():
    ap = argparse.ArgumentParser()
    add_decode_args(ap)
    args = ap.parse_args()
    device, ceiling, cases = start_decode_run(args)
    records = []
    for hkv, name, lens in cases:
        b, hq, d = len(lens), 32, args.head_dim
        length = max(lens)
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, hkv, length, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        valid_bytes = decode_bytes(lens, hkv, d, 2, hq)
        for backend, which in BACKENDS.items():
            rec = {"op": "decode", "backend": "torch_sdpa_" + backend, "device": device,
                   "dtype": "bf16", "kv_dtype": "bf16", "layout": "contiguous", "page_size": 0,
                   "num_q_heads": hq, "num_kv_heads": hkv, "head_dim": d, "batch": b,
                   "shape": name, "seq_lens_desc": name + (" (padded to max)" if name == "d-ragged" else ""),
                   "ceiling_gbps": ceiling, "launch": args.launch}
            try:
                with sdpa_kernel(which):
                    fn = lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, enable_gqa=hkv != hq)
                    med, mn = time_us(graph_replay(fn) if args.launch == "graph" else fn, args.iters)
                rate_record(rec, med, mn, valid_bytes, ceiling)
            except RuntimeError as err:  # backend does not support this shape
                error_record(rec, err)
            records.append(rec)
            print(json.dumps(rec), flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    if args.out:
        write_records(args.out, records)


if __name__ == "__main__":
    main()
