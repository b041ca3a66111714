#!/usr/bin/env python3
"""Times PyTorch's attention on the prefill / append shapes of BENCHMARKS.md with a contiguous
(non-paged) KV cache: scaled_dot_product_attention with the cuDNN and flash backends, and
flex_attention (compiled). Causal masks are aligned to the bottom right (the new tokens are
the last positions of each sequence's KV). Prints one JSON record per (shape, backend) in the
benchmark contract, with the dense bf16 matmul ceiling measured in the same run.

Usage: python3 bench/torch_sdpa_prefill.py [--iters 50] [--warmup-ms 500] [--head-dim 128] [--out FILE]
"""
import argparse
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from torch_bench import time_us, write_records

SHAPES = [("p-8x4096", 8, 4096, 0), ("a-512-on-8x8192", 8, 512, 8192)]  # name, batch, new, cached
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
HQ, HKV = 32, 8


def matmul_ceiling_tflops():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    med, _ = time_us(lambda: a @ b, 10)
    return 2 * n ** 3 / (med * 1e-6) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup-ms", type=float, default=500.0,
                    help="warm-up per measurement, at least this long (the C++ benchmark's default)")
    ap.add_argument("--head-dim", type=int, default=128, help="head dimension (BENCHMARKS.md's shapes: 128)")
    ap.add_argument("--out")
    args = ap.parse_args()
    D = args.head_dim
    torch.manual_seed(0)
    device = torch.cuda.get_device_name()
    ceiling = matmul_ceiling_tflops()
    records = []
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
    except Exception as err:  # no flex_attention in this PyTorch
        flex, flex_error = None, str(err)
    for name, b, new, cached in SHAPES:
        length = new + cached
        q = torch.randn(b, HQ, new, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, HKV, length, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        flops = 4.0 * b * HQ * D * (new * cached + new * (new + 1) / 2)
        mask = causal_lower_right(new, length)
        runs = {}
        for backend, which in BACKENDS.items():
            def fn(which=which):
                with sdpa_kernel(which):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            runs["torch_sdpa_" + backend] = fn
        if flex is not None:
            offset = cached
            block_mask = create_block_mask(lambda b_, h, qi, ki: ki <= qi + offset, None, None, new, length)
            runs["torch_flex_attention"] = lambda: flex(q, k, v, block_mask=block_mask, enable_gqa=True)
        for backend, fn in runs.items():
            rec = {"op": "append" if cached else "prefill", "backend": backend, "device": device,
                   "dtype": "bf16", "kv_dtype": "bf16", "layout": "contiguous", "page_size": 0,
                   "num_q_heads": HQ, "num_kv_heads": HKV, "head_dim": D, "batch": b, "shape": name,
                   "seq_lens_desc": f"{b} x {new} new" + (f" on {cached} cached" if cached else ""),
                   "ceiling_tflops": ceiling}
            try:
                med, mn = time_us(fn, args.iters, warmup_ms=args.warmup_ms)
                tflops = flops / (med * 1e-6) / 1e12
                rec.update({"time_us_median": med, "time_us_min": mn, "achieved_tflops": tflops,
                            "ratio_to_ceiling": tflops / ceiling})
            except Exception as err:  # backend does not support this shape or mask
                rec.update({"error": str(err).splitlines()[0][:200]})
            records.append(rec)
            print(json.dumps(rec), flush=True)
        if flex is None:
            print(json.dumps({"backend": "torch_flex_attention", "error": flex_error[:200]}), flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    if args.out:
        write_records(args.out, records)


if __name__ == "__main__":
    main()
