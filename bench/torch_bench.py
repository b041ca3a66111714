"""Helpers shared by the PyTorch competitor scripts (bench/torch_sdpa_*.py): CUDA-event timing
and writing the JSON records."""
import json
import statistics

import torch


def time_us(fn, iters, warmup=5):
    """Median and minimum time of fn() in microseconds over `iters` calls, each between two
    CUDA events, after `warmup` untimed calls."""
    for _ in range(warmup):
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


def write_records(path, records):
    """One JSON object a line, as the C++ benchmarks write them."""
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
