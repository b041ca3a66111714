"""Helpers shared by the PyTorch competitor scripts (bench/torch_sdpa_*.py): CUDA-event timing
and writing the JSON records."""
import json
import statistics
import time

import torch


def time_us(fn, iters, warmup=5, warmup_ms=0.0):
    """Median and minimum time of fn() in microseconds over `iters` calls, each between two
    CUDA events, after `warmup` untimed calls and, with warmup_ms > 0, as many more as fill
    that many milliseconds (compute-bound kernels are then timed at the clock the GPU's power
    limit lets them keep, as the C++ benchmarks do)."""
    start = time.perf_counter()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        for _ in range(8):
            fn()
        torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return statistics.median(times), min(times)


def graph_replay(fn, warmup=3):
    """fn captured once in a CUDA graph (after `warmup` calls on a side stream, as capture
    wants): returns the replay, to time as the C++ benchmarks time their captured graphs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def write_records(path, records):
    """One JSON object a line, as the C++ benchmarks write them."""
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
