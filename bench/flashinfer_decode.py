#!/usr/bin/env python3
"""Times FlashInfer's paged decode (BatchDecodeWithPagedKVCacheWrapper) on the decode shapes of
BENCHMARKS.md: the paged competitor, reading the same cache format as pagedattn (pages of 16
tokens, NHD, a CSR page table over shuffled pages, bf16 or fp8 e4m3 KV, 32 query heads of
head_dim 128 over 8 or 32 KV heads, real ragged lengths rather than padding). Prints one JSON
record per (shape, heads, KV dtype, kernel) in the benchmark contract of
bench/torch_sdpa_decode.py, rated against the device-to-device copy ceiling of the same run.

Four kernels are timed (--kernels picks them):
- cuda_cores ("flashinfer_decode"): FlashInfer's CUDA-core decode kernel, backend "fa2";
- tensor_cores ("flashinfer_decode_tc"): use_tensor_cores=True, its FA2 prefill kernel run as
  decode, backend "fa2";
- fa3 ("flashinfer_decode_fa3"): use_tensor_cores=True with backend "fa3", its Hopper
  (warp-specialised, TMA + wgmma) prefill kernel run as decode; bf16 KV only (FlashInfer's fa3
  takes fp8 KV only with fp8 queries);
- xqa ("flashinfer_xqa"): TensorRT-LLM's XQA decode kernels as FlashInfer 0.7.4 ships them
  (`xqa_batch_decode_with_kv_cache`, a padded block table), with its Hopper wgmma kernel for fp8
  KV; what TensorRT-LLM runs for generation.
The wrapper's backends are named: "auto" may route a plan to other kernels (fa3, cuDNN, XQA) by
device and shape, which would change what is timed from one machine to the next and need kernels
that the carried payload does not hold.

plan() runs once per case outside the timed region; run() is timed with CUDA events, eagerly
(--launch calls) or as replays of a captured CUDA graph (--launch graph, with the wrapper's
use_cuda_graph=True and fixed page-table buffers, as FlashInfer asks for capture). Each case is
checked once against a float32 PyTorch reference on its first and last sequence; the largest
absolute error goes to stderr and never fails the run.

Usage: python3 bench/flashinfer_decode.py [--iters 50] [--kv-heads 8,32] [--shapes BxL,...]
                                          [--kv-dtype bf16,fp8_e4m3] [--fp8-shapes d-b64|all]
                                          [--kernels cuda_cores,tensor_cores,fa3,xqa]
                                          [--launch calls|graph] [--out FILE]

On a GPU machine without a package registry, FlashInfer comes from the payload that
tools/device/prepare_flashinfer.sh builds into .whl/ (its header says what it holds): a trimmed
FlashInfer whose decode kernels for sm_90a are already compiled, and the tvm-ffi runtime they
link to. Unpacked into a folder on PYTHONPATH, with FLASHINFER_DISABLE_JIT=1 (a missing kernel is
then an error instead of a compile) and FLASHINFER_WORKSPACE_BASE pointing at a writable folder
(FlashInfer writes the sources it generates there even when it loads a precompiled kernel):

    python3 -m tarfile --filter data -e .whl/flashinfer-*-sm90a-decode.tar.xz /tmp/flashinfer-site
    export PYTHONPATH=/tmp/flashinfer-site FLASHINFER_DISABLE_JIT=1 FLASHINFER_WORKSPACE_BASE=/tmp/flashinfer-ws
    python3 bench/flashinfer_decode.py --launch graph --out $OUT/flashinfer.json

With the same exports, tools/device/run_gpu_suite.sh finds FlashInfer and adds these records to
its decode table.
"""
import argparse
import json
import math
import sys

import torch

from paged_cache import PAGE_SIZE, paged_cache, padded_block_table, reference_error
from torch_bench import decode_bytes, error_record, graph_replay, rate_record, time_us, write_records
from torch_sdpa_decode import add_decode_args, start_decode_run

try:
    import flashinfer
except ImportError as err:
    raise SystemExit(f"flashinfer_decode.py: cannot import flashinfer ({err}). On a machine without a "
                     "package registry, unpack the payload of tools/device/prepare_flashinfer.sh and put "
                     "it on PYTHONPATH (that script's header shows how).")

NUM_Q_HEADS = 32
KV_DTYPES = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}
# Room for FlashInfer's split-KV partial results: twice the 128 MiB its documentation
# recommends, as these shapes reach 32k tokens a sequence and 512k a batch. It must start zeroed.
WORKSPACE_BYTES = 256 << 20
# --kernels name -> the record's backend name.
KERNELS = {"cuda_cores": "flashinfer_decode", "tensor_cores": "flashinfer_decode_tc",
           "fa3": "flashinfer_decode_fa3", "xqa": "flashinfer_xqa"}


def wrapper_call(cache, lens, hkv, d, kv_dtype, kernel, launch, workspace, q, out):
    """The decode wrapper planned for one case: its run() as a callable. Graph capture needs
    use_cuda_graph=True: plan() then writes the page table into the fixed buffers given here,
    which the captured kernels read."""
    kv, indptr, indices, last_page_len = cache
    fixed = {}
    if launch == "graph":
        fixed = {"use_cuda_graph": True, "paged_kv_indptr_buffer": torch.empty_like(indptr),
                 "paged_kv_indices_buffer": torch.empty_like(indices),
                 "paged_kv_last_page_len_buffer": torch.empty_like(last_page_len)}
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace, "NHD", use_tensor_cores=kernel != "cuda_cores", backend="fa3" if kernel == "fa3" else "fa2",
        **fixed)
    wrapper.plan(indptr, indices, last_page_len, NUM_Q_HEADS, hkv, d, PAGE_SIZE,
                 pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=kv_dtype,
                 o_data_type=torch.bfloat16)
    return lambda: wrapper.run(q, kv, out=out)


def xqa_call(cache, lens, d, workspace, q, out):
    """XQA over the same pages: a padded block table and the lengths (read as uint32), the
    softmax scale 1/sqrt(d) as its bmm1 scale, unit KV scales (fp8 codes hold the values)."""
    kv, indptr, indices, _ = cache
    table = padded_block_table(indptr, indices)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    max_len = table.shape[1] * PAGE_SIZE
    return lambda: flashinfer.decode.xqa_batch_decode_with_kv_cache(
        q, kv, workspace, table, seq_lens, max_len, bmm1_scale=1.0 / math.sqrt(d), bmm2_scale=1.0, out=out)


def time_case(cache, lens, hkv, d, kv_dtype, kernel, launch, iters, label):
    """Sets up one case, checks it against the reference and times its call: (median, min) in
    microseconds. Everything it allocates (workspace, graph) is released on return, before the
    next case allocates its own."""
    kv, indptr, indices, _ = cache
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    q = torch.randn(len(lens), NUM_Q_HEADS, d, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)  # preallocated: the timed call allocates nothing
    if kernel == "xqa":
        fn = xqa_call(cache, lens, d, workspace, q, out)
    else:
        fn = wrapper_call(cache, lens, hkv, d, kv_dtype, kernel, launch, workspace, q, out)
    fn()
    err = reference_error(q, kv, indptr.cpu(), indices.cpu(), lens, out, sorted({0, len(lens) - 1}))
    print(f"{label}: max abs error {err:.3g} against the float32 reference", file=sys.stderr, flush=True)
    return time_us(graph_replay(fn) if launch == "graph" else fn, iters)


def main():
    ap = argparse.ArgumentParser()
    add_decode_args(ap, "head dimension (BENCHMARKS.md's shapes: 128; the carried kernels: 128 only)")
    ap.add_argument("--kv-dtype", default="bf16,fp8_e4m3", help="KV cache dtypes to time: bf16, fp8_e4m3")
    ap.add_argument("--fp8-shapes", default="d-b64",
                    help="comma-separated shape names whose fp8 cache is timed (the fp8 rows of "
                         "`pagedattn bench decode --standard-shapes`: d-b64), or all")
    ap.add_argument("--kernels", default=",".join(KERNELS),
                    help="comma-separated kernels to time: " + ", ".join(KERNELS) + " (the module docstring says which is which)")
    args = ap.parse_args()
    kv_dtypes = args.kv_dtype.split(",")
    for name in kv_dtypes:
        if name not in KV_DTYPES:
            raise SystemExit(f"--kv-dtype: {name!r} is not one of {', '.join(KV_DTYPES)}")
    kernels = args.kernels.split(",")
    for name in kernels:
        if name not in KERNELS:
            raise SystemExit(f"--kernels: {name!r} is not one of {', '.join(KERNELS)}")
    device, ceiling, cases = start_decode_run(args)
    records = []
    for hkv, name, lens in cases:
        b, d, tokens = len(lens), args.head_dim, sum(lens)
        for kv_name in kv_dtypes:
            if kv_name != "bf16" and args.fp8_shapes != "all" and name not in args.fp8_shapes.split(","):
                continue
            kv_dtype = KV_DTYPES[kv_name]
            cache = paged_cache(lens, hkv, d, kv_dtype)
            valid_bytes = decode_bytes(lens, hkv, d, cache[0].element_size(), NUM_Q_HEADS)
            for kernel in kernels:
                if kernel == "fa3" and kv_name != "bf16":
                    continue  # FlashInfer's fa3 kernels take fp8 KV only with fp8 queries
                rec = {"op": "decode", "backend": KERNELS[kernel],
                       "device": device, "dtype": "bf16", "kv_dtype": kv_name, "layout": "NHD",
                       "page_size": PAGE_SIZE, "num_q_heads": NUM_Q_HEADS, "num_kv_heads": hkv,
                       "head_dim": d, "batch": b, "shape": name,
                       "seq_lens_desc": f"{name} ({b} seqs, {tokens} tokens)",
                       "ceiling_gbps": ceiling, "launch": args.launch, "iterations": args.iters,
                       "flashinfer_version": flashinfer.__version__}
                try:
                    med, mn = time_case(cache, lens, hkv, d, kv_dtype, kernel, args.launch, args.iters,
                                        f"{rec['backend']} {name} {NUM_Q_HEADS}/{hkv} {kv_name}")
                    rate_record(rec, med, mn, valid_bytes, ceiling)
                except (RuntimeError, ValueError, NotImplementedError) as err:  # case not supported
                    error_record(rec, err)
                records.append(rec)
                print(json.dumps(rec), flush=True)
            del cache
            torch.cuda.empty_cache()
    if args.out:
        write_records(args.out, records)


if __name__ == "__main__":
    main()
