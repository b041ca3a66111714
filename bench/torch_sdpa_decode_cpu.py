#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on the CPU (its flash and math backends) on the
CPU decode shape of BENCHMARKS.md (GQA 32/8, head_dim 128, 16 x 2048 tokens) with a contiguous
(non-paged) KV cache: what a user would pick instead of `pagedattn bench decode --device cpu`.
As that benchmark does, it measures the streaming-read ceiling in the same run (a sum over a
1 GiB buffer with all threads) and rotates disjoint KV sets between calls until they span at
least twice the last-level cache, so that every call reads its KV from memory. Prints one JSON
record per (KV dtype, backend) in the benchmark contract.

With --op prefill it times the CPU prefill shape instead (1 x 2048 new tokens, causal, GQA 32/8,
bf16: `pagedattn bench prefill --device cpu`), counting FLOPs as that benchmark does.

Usage: python3 bench/torch_sdpa_decode_cpu.py [--op decode|prefill] [--iters 20] [--threads N]
                                               [--kv-dtypes bf16,f32] [--backends flash,math]
                                               [--batch 16] [--seq-len 2048] [--out FILE]
"""
import argparse
import json
import os
import platform
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_bench import write_records

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def last_level_cache_bytes():
    """The largest cache /sys reports for cpu0 (32 MiB where it reports none, as the C++ side)."""
    best = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in os.listdir(base) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
        best = max(best, int(text.rstrip("KMG")) * mult)
    return best or 32 << 20


def time_us(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times), min(times)


def read_ceiling_gbps():
    """Streaming read: a sum over 1 GiB of f32 with all threads, the best of 5."""
    buf = torch.ones(1 << 28, dtype=torch.float32)
    best = min(time_us(lambda: buf.sum(), 5, warmup=1))
    return buf.numel() * 4 / (best * 1e-6) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", choices=["decode", "prefill"], default="decode")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--kv-dtypes", default="bf16,f32")
    ap.add_argument("--backends", default="flash,math")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--out")
    args = ap.parse_args()
    for name in args.kv_dtypes.split(","):
        if name not in DTYPES:
            raise SystemExit(f"--kv-dtypes: {name!r} is not one of {', '.join(DTYPES)}")
    for name in args.backends.split(","):
        if name not in BACKENDS:
            raise SystemExit(f"--backends: {name!r} is not one of {', '.join(BACKENDS)}")
    if args.iters < 1 or args.threads < 1 or args.batch < 1 or args.seq_len < 1:
        raise SystemExit("--iters, --threads, --batch and --seq-len must be positive")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.op == "prefill":
        records = time_prefill(args)
    else:
        records = time_decode(args)
    if args.out:
        write_records(args.out, records)


def time_prefill(args):
    b, hq, hkv, d, n = 1, 32, 8, 128, args.seq_len
    records = []
    for name in args.kv_dtypes.split(","):
        dt = DTYPES[name]
        q = torch.randn(b, hq, n, d, dtype=dt)
        k, v = torch.randn(b, hkv, n, d, dtype=dt), torch.randn(b, hkv, n, d, dtype=dt)
        flops = 4.0 * b * (n * (n + 1) / 2) * d * hq  # causal: query i sees i + 1 keys
        for backend in args.backends.split(","):
            rec = {"op": "prefill", "backend": "torch_sdpa_cpu_" + backend, "device": cpu_name(),
                   "dtype": name, "kv_dtype": name, "layout": "contiguous", "page_size": 0,
                   "num_q_heads": hq, "num_kv_heads": hkv, "head_dim": d, "batch": b,
                   "seq_lens_desc": f"{b}x{n} causal", "num_threads": args.threads,
                   "torch_version": torch.__version__}
            try:
                with sdpa_kernel(BACKENDS[backend]):
                    med, mn = time_us(lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, is_causal=True, enable_gqa=True), args.iters)
                rec.update({"time_us_median": med, "time_us_min": mn,
                            "achieved_tflops": flops / (med * 1e-6) / 1e12})
            except RuntimeError as err:
                rec.update({"error": str(err).splitlines()[0][:200]})
            records.append(rec)
            print(json.dumps(rec), flush=True)
    return records


def time_decode(args):
    b, hq, hkv, d, length = args.batch, 32, 8, 128, args.seq_len
    records = []
    for name in args.kv_dtypes.split(","):
        dt = DTYPES[name]
        elem = torch.tensor([], dtype=dt).element_size()
        set_bytes = 2 * b * hkv * length * d * elem
        sets = max(1, -(-2 * last_level_cache_bytes() // set_bytes))
        q = torch.randn(b, hq, 1, d, dtype=dt)
        kv = [(torch.randn(b, hkv, length, d, dtype=dt), torch.randn(b, hkv, length, d, dtype=dt))
              for _ in range(sets)]
        valid_bytes = set_bytes + 2 * q.numel() * elem
        for backend in args.backends.split(","):
            which = BACKENDS[backend]
            ceiling = read_ceiling_gbps()
            rec = {"op": "decode", "backend": "torch_sdpa_cpu_" + backend, "device": cpu_name(),
                   "dtype": name, "kv_dtype": name, "layout": "contiguous", "page_size": 0,
                   "num_q_heads": hq, "num_kv_heads": hkv, "head_dim": d, "batch": b,
                   "seq_lens_desc": f"{b}x{length}", "num_threads": args.threads, "kv_sets": sets,
                   "torch_version": torch.__version__}
            turn = [0]

            def call():
                k, v = kv[turn[0] % sets]
                turn[0] += 1
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)

            try:
                with sdpa_kernel(which):
                    med, mn = time_us(call, args.iters)
                ceiling = max(ceiling, read_ceiling_gbps())  # before and after, the larger (as the C++ side)
                gbps = valid_bytes / (med * 1e-6) / 1e9
                rec.update({"time_us_median": med, "time_us_min": mn, "achieved_gbps": gbps,
                            "ceiling_gbps": ceiling, "ratio_to_ceiling": gbps / ceiling})
            except RuntimeError as err:  # backend does not take this case
                rec.update({"error": str(err).splitlines()[0][:200]})
            records.append(rec)
            print(json.dumps(rec), flush=True)
        del q, kv
    return records


if __name__ == "__main__":
    main()
