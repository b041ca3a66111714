"""Helpers shared by the PyTorch competitor scripts (bench/torch_sdpa_*.py, the paged decode
competitors): CUDA-event timing, the bytes a decode must move, and the JSON records."""
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


def mt19937_64(seed):
    """The outputs of std::mt19937_64(seed), the engine the C++ standard specifies."""
    n, m, mask = 312, 156, (1 << 64) - 1
    state = [seed & mask]
    for i in range(1, n):
        state.append((6364136223846793005 * (state[-1] ^ (state[-1] >> 62)) + i) & mask)
    index = n
    while True:
        if index >= n:
            for i in range(n):
                x = (state[i] & 0xFFFFFFFF80000000) | (state[(i + 1) % n] & 0x7FFFFFFF)
                state[i] = state[(i + m) % n] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            index = 0
        y = state[index]
        index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        yield y ^ (y >> 43)


def ragged_lengths(count, max_len, seed):
    """The lengths bench/cuda_decode_bench.cpp's ragged_lengths draws (d-ragged: 128, 8192, 2024):
    std::uniform_int_distribution(1, max_len) over std::mt19937_64(seed), as GCC's libstdc++
    computes it for a 64-bit engine (the high half of a 128-bit product, Lemire's rejection), so
    that the competitors time the very batch pagedattn does (d-ragged: 539565 tokens)."""
    rng, span, mask = mt19937_64(seed), max_len, (1 << 64) - 1
    lengths = []
    for _ in range(count):
        product = next(rng) * span
        if product & mask < span:
            threshold = ((1 << 64) - span) % span
            while product & mask < threshold:
                product = next(rng) * span
        lengths.append(1 + (product >> 64))
    return lengths


def write_records(path, records):
    """One JSON object a line, as the C++ benchmarks write them."""
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def decode_bytes(lens, hkv, d, kv_element_size, num_q_heads):
    """The bytes a decode must move: each valid K and V element once (not the unused tail of a
    last page, nor a contiguous cache's padding), the bf16 queries in and the outputs out."""
    return 2 * sum(lens) * hkv * d * kv_element_size + 2 * len(lens) * num_q_heads * d * 2


def rate_record(rec, med, mn, valid_bytes, ceiling, **extra):
    """Adds a timed case's figures to its record: times (us), GB/s of the bytes it must move,
    the ratio to the run's copy ceiling, and any `extra` fields."""
    gbps = valid_bytes / (med * 1e-6) / 1e9
    rec.update({"time_us_median": med, "time_us_min": mn, "achieved_gbps": gbps,
                "ratio_to_ceiling": gbps / ceiling, **extra})


def error_record(rec, err):
    """Marks a record whose case the competitor does not support or failed: the error's first line."""
    rec.update({"error": (str(err).splitlines() or [type(err).__name__])[0][:200]})
