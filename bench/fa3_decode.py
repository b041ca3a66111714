#!/usr/bin/env python3
"""Times FlashAttention-3's paged decode as vLLM runs it on Hopper (its FLASH_ATTN backend, the
default there) on the decode shapes of BENCHMARKS.md, over the same paged cache as
bench/flashinfer_decode.py: pages of 16 tokens, NHD, shuffled page ids, bf16 KV, 32 query heads
of head_dim 128 over 8 or 32 KV heads. Prints one JSON record per (shape, heads) in the benchmark
contract of bench/torch_sdpa_decode.py (backend "vllm_fa3"), rated against the device-to-device
copy ceiling of the same run.

The kernels are those of vLLM's fork of FlashAttention (github.com/vllm-project/flash-attention,
hopper/), compiled for sm_90a by tools/device/prepare_fa3.sh into one shared library with
bench/fa3_decode_shim.cu, the C entry point this script calls through ctypes. The call is the one
vLLM makes on a decode step: varlen queries (one a sequence), the lengths as seqused_k, a padded
page table, causal, and under CUDA graphs (vLLM's full-graph mode) num_splits = 32, the bound
within which FlashAttention's scheduler picks each sequence's splits on the GPU (--num-splits; 0
takes the host heuristic of vLLM's eager mode). That scheduler's metadata (each sequence's splits,
from FlashAttention's prepare kernel) is computed once a step in vLLM and reused by every layer's
call, so by default the first call computes it and the timed calls reuse it
(--scheduler-metadata per-step); per-call computes it inside every timed call. Each case is
checked against a float32 PyTorch reference on its first and last sequence, after the first call
and again after the timed ones; the largest absolute error goes to stderr and never fails the run.

Usage: python3 bench/fa3_decode.py [--lib PATH] [--iters 50] [--kv-heads 8,32] [--shapes BxL,...]
                                   [--num-splits 32] [--scheduler-metadata per-step|per-call]
                                   [--launch calls|graph] [--out FILE]
The library defaults to $PAGEDATTN_FA3_LIB, else .whl/fa3/libfa3_decode.so.
"""
import argparse
import ctypes
import json
import os
import sys

import torch

from paged_cache import PAGE_SIZE, paged_cache, padded_block_table, reference_error
from torch_bench import decode_bytes, error_record, graph_replay, rate_record, time_us, write_records
from torch_sdpa_decode import add_decode_args, start_decode_run

NUM_Q_HEADS = 32
DEFAULT_LIB = os.environ.get("PAGEDATTN_FA3_LIB", ".whl/fa3/libfa3_decode.so")


def load_library(path):
    if not os.path.exists(path):
        raise SystemExit(f"fa3_decode.py: {path} does not exist: build it with tools/device/prepare_fa3.sh "
                         "(or point --lib / PAGEDATTN_FA3_LIB at it)")
    lib = ctypes.CDLL(os.path.abspath(path))
    i, p = ctypes.c_int, ctypes.c_void_p
    lib.fa3_plan.argtypes = [i, i, i, i, i, i, i, i, ctypes.POINTER(i)]
    lib.fa3_plan.restype = i
    lib.fa3_paged_decode.argtypes = [p] * 8 + [i] * 7 + [ctypes.c_longlong, i, p, p, p, i, p, ctypes.c_char_p, i]
    lib.fa3_paged_decode.restype = i
    return lib


def fa3_call(lib, cache, lens, hkv, d, num_splits, reuse_metadata, q, out):
    """The decode step as a callable (its buffers held by the closure), and the split count. With
    reuse_metadata, only the first call computes the scheduler metadata."""
    kv, indptr, indices, _ = cache
    b = len(lens)
    table = padded_block_table(indptr, indices)
    seqused = torch.tensor(lens, dtype=torch.int32, device="cuda")
    cu_seqlens_q = torch.arange(b + 1, dtype=torch.int32, device="cuda")
    lse = torch.empty(NUM_Q_HEADS, b, dtype=torch.float32, device="cuda")
    shape = (b, NUM_Q_HEADS, hkv, PAGE_SIZE, kv.shape[0], table.shape[1], max(lens))
    meta_ints = ctypes.c_int(0)
    splits = lib.fa3_plan(*shape, num_splits, ctypes.byref(meta_ints))
    metadata = torch.zeros(meta_ints.value, dtype=torch.int32, device="cuda")
    accum = (torch.empty(splits, NUM_Q_HEADS, b, d, dtype=torch.float32, device="cuda") if splits > 1 else None)
    lse_accum = (torch.empty(splits, NUM_Q_HEADS, b, dtype=torch.float32, device="cuda") if splits > 1 else None)
    k, v = kv[:, 0], kv[:, 1]
    err = ctypes.create_string_buffer(512)
    computed = [False]

    def call():
        ready = 1 if reuse_metadata and computed[0] else 0
        rc = lib.fa3_paged_decode(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                                  cu_seqlens_q.data_ptr(), seqused.data_ptr(), table.data_ptr(), *shape,
                                  k.stride(0), splits, accum.data_ptr() if accum is not None else None,
                                  lse_accum.data_ptr() if lse_accum is not None else None, metadata.data_ptr(),
                                  ready, torch.cuda.current_stream().cuda_stream, err, len(err))
        if rc != 0:
            raise RuntimeError(err.value.decode() or "fa3_paged_decode failed")
        computed[0] = True
    return call, splits


def main():
    ap = argparse.ArgumentParser()
    add_decode_args(ap, "head dimension (BENCHMARKS.md's shapes: 128; the library holds 128 only)")
    ap.add_argument("--lib", default=DEFAULT_LIB, help="the library tools/device/prepare_fa3.sh builds")
    ap.add_argument("--num-splits", type=int, default=32,
                    help="split bound (vLLM's flash_attn_max_num_splits_for_cuda_graph, 32); 0: the host heuristic")
    ap.add_argument("--scheduler-metadata", choices=["per-step", "per-call"], default="per-step",
                    help="per-step: computed by the first call and reused, as vLLM's layers share a step's; "
                         "per-call: computed inside every call")
    args = ap.parse_args()
    if args.head_dim != 128:
        raise SystemExit("fa3_decode.py: the carried kernels are head_dim 128 only")
    lib = load_library(args.lib)
    device, ceiling, cases = start_decode_run(args)
    records = []
    for hkv, name, lens in cases:
        b, d, tokens = len(lens), args.head_dim, sum(lens)
        cache = paged_cache(lens, hkv, d, torch.bfloat16)
        valid_bytes = decode_bytes(lens, hkv, d, 2, NUM_Q_HEADS)
        rec = {"op": "decode", "backend": "vllm_fa3", "device": device, "dtype": "bf16", "kv_dtype": "bf16",
               "layout": "NHD", "page_size": PAGE_SIZE, "num_q_heads": NUM_Q_HEADS, "num_kv_heads": hkv,
               "head_dim": d, "batch": b, "shape": name, "seq_lens_desc": f"{name} ({b} seqs, {tokens} tokens)",
               "ceiling_gbps": ceiling, "launch": args.launch, "iterations": args.iters,
               "scheduler_metadata": args.scheduler_metadata}
        try:
            q = torch.randn(b, NUM_Q_HEADS, d, device="cuda", dtype=torch.bfloat16)
            out = torch.empty_like(q)
            fn, splits = fa3_call(lib, cache, lens, hkv, d, args.num_splits, args.scheduler_metadata == "per-step", q, out)
            kv, indptr, indices, _ = cache
            rows = sorted({0, b - 1})

            def checked():
                out.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                return reference_error(q, kv, indptr.cpu(), indices.cpu(), lens, out, rows)
            err = checked()
            med, mn = time_us(graph_replay(fn) if args.launch == "graph" else fn, args.iters)
            err = max(err, checked())  # the calls after the first (metadata reused where per-step)
            print(f"vllm_fa3 {name} {NUM_Q_HEADS}/{hkv}: at most {splits} splits, max abs error {err:.3g} against the "
                  "float32 reference", file=sys.stderr, flush=True)
            rate_record(rec, med, mn, valid_bytes, ceiling, max_splits=splits, max_abs_error=err)
        except RuntimeError as e:
            error_record(rec, e)
        records.append(rec)
        print(json.dumps(rec), flush=True)
        del cache
        torch.cuda.empty_cache()
    if args.out:
        write_records(args.out, records)


if __name__ == "__main__":
    main()
