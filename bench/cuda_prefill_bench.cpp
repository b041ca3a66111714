// GPU prefill / append benchmark: the BENCHMARKS.md prefill shapes through pagedattn::prefill on
// CUDA, beside the dense bf16 matmul ceiling (cuBLAS) measured in the same run. Each case is
// captured once in a CUDA graph and replayed (the op checks its host copies on the host).
#include <cuda_runtime.h>
#if defined(PAGEDATTN_BENCH_CUBLAS)
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "benchmarks.h"
#include "cuda_bench_util.h"
#include "pagedattn/ops.h"

namespace pagedattn::bench {

std::vector<CudaPrefillShape> standard_cuda_prefill_shapes() {
  std::vector<CudaPrefillShape> out;
  auto add_pair = [&](std::int64_t page, DType kv_dtype) {
    CudaPrefillShape prefill;
    prefill.name = "p-8x4096";
    prefill.batch = 8;
    prefill.new_tokens = 4096;
    prefill.page_size = page;
    prefill.kv_dtype = kv_dtype;
    out.push_back(prefill);
    CudaPrefillShape append = prefill;
    append.name = "a-512-on-8x8192";
    append.new_tokens = 512;
    append.cached_tokens = 8192;
    out.push_back(append);
  };
  add_pair(16, DType::kBF16);
  add_pair(1, DType::kBF16);
  add_pair(16, DType::kF8E4M3);  // bf16 q over fp8 e4m3 caches, as the decode table has fp8 d-b64
  return out;
}

double measure_cuda_matmul_tflops(int device) {
#if defined(PAGEDATTN_BENCH_CUBLAS)
  ok(cudaSetDevice(device), "set device");
  constexpr int kN = 8192;
  const std::size_t bytes = std::size_t{kN} * kN * 2;
  Gpu a(bytes), b(bytes), c(bytes);
  fill_random(a.ptr, bytes, DType::kBF16, 11);
  fill_random(b.ptr, bytes, DType::kBF16, 12);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return 0.0;
  // Destroyed on every path, a throwing check included.
  const std::unique_ptr<cublasContext, decltype(&cublasDestroy)> handle_owner(handle, &cublasDestroy);
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &alpha, a.ptr, CUDA_R_16BF, kN, b.ptr,
                        CUDA_R_16BF, kN, &beta, c.ptr, CUDA_R_16BF, kN, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const Events events(2);
  const cudaEvent_t start = events[0], stop = events[1];
  std::vector<double> tflops;
  for (int i = 0; i < 12 && gemm() == CUBLAS_STATUS_SUCCESS; ++i) {
    ok(cudaEventRecord(start), "record");
    gemm();
    ok(cudaEventRecord(stop), "record");
    ok(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    if (i >= 2) tflops.push_back(2.0 * kN * static_cast<double>(kN) * kN / (ms * 1e-3) / 1e12);
  }
  return tflops.empty() ? 0.0 : median(tflops);
#else
  (void)device;
  return 0.0;  // no cuBLAS in this build: the records carry no ratio
#endif
}

std::vector<nlohmann::json> run_cuda_prefill_bench(const CudaPrefillBenchConfig& config, const Progress& progress) {
  ok(cudaSetDevice(config.device), "set device");
  const Device gpu = Device::cuda(config.device);
  const std::string device = cuda_device_name(config.device);
  if (progress) progress("measuring the matmul ceiling");
  const double ceiling = measure_cuda_matmul_tflops(config.device);
  const Stream stream;
  std::vector<nlohmann::json> records;
  for (const CudaPrefillShape& shape : config.shapes) {
    if (progress) progress("prefill " + shape.name + " page " + std::to_string(shape.page_size));
    const std::int64_t S = shape.batch, P = shape.page_size, D = shape.head_dim;
    const std::int64_t Hq = shape.num_q_heads, Hkv = shape.num_kv_heads;
    const std::int64_t len = shape.cached_tokens + shape.new_tokens, T = S * shape.new_tokens;
    const std::int64_t per_seq = (len + P - 1) / P, pages = S * per_seq;
    const RandomCache pool(KVCacheSpec{shape.layout, shape.kv_dtype, pages, P, Hkv, D}, config.device);
    const PagedKV& cache = pool.views;
    const std::vector<std::int32_t> ids = shuffled_page_ids(pages, kPageOrderSeed);
    BlockTableData bt;
    bt.num_seqs = S;
    bt.max_pages = per_seq;
    bt.block_table = ids;
    bt.seq_lens.assign(static_cast<std::size_t>(S), static_cast<std::int32_t>(len));
    std::vector<std::int32_t> indptr(static_cast<std::size_t>(S + 1));
    for (std::int64_t s = 0; s <= S; ++s) indptr[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(s * shape.new_tokens);
    Gpu table(ids.size() * 4), lens(static_cast<std::size_t>(S) * 4), d_indptr(indptr.size() * 4);
    ok(cudaMemcpy(table.ptr, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "table");
    ok(cudaMemcpy(lens.ptr, bt.seq_lens.data(), bt.seq_lens.size() * 4, cudaMemcpyHostToDevice), "lens");
    ok(cudaMemcpy(d_indptr.ptr, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice), "indptr");
    const PageTable host_table = bt.view();
    const PageTable dev_table = BlockTable{TensorView(table.ptr, DType::kI32, {S, per_seq}, gpu),
                                           TensorView(lens.ptr, DType::kI32, {S}, gpu)};
    const std::size_t q_bytes = static_cast<std::size_t>(T * Hq * D) * dtype_size(shape.dtype);
    Gpu q(q_bytes), out(q_bytes);
    fill_random(q.ptr, q_bytes, shape.dtype, 3);
    const Context ctx{gpu, stream};
    AttentionParams params;
    params.causal = shape.causal;
    const PrefillOptions options{&host_table, TensorView(indptr.data(), DType::kI32, {S + 1})};

    const std::vector<double> us = time_captured(stream, [&] {
      prefill(ctx, TensorView(q.ptr, shape.dtype, {T, Hq, D}, gpu), TensorView(d_indptr.ptr, DType::kI32, {S + 1}, gpu),
              cache, dev_table, params, TensorView(out.ptr, shape.dtype, {T, Hq, D}, gpu), {}, options);
    }, config.warmup, config.iterations, config.warmup_ms);

    // QK^T and PV: 4 flops per (query head, query, visible key, dim).
    const double n = static_cast<double>(shape.new_tokens), c = static_cast<double>(shape.cached_tokens);
    const double keys_per_seq = shape.causal ? n * c + n * (n + 1) / 2 : n * static_cast<double>(len);
    const double flops = 4.0 * static_cast<double>(S * Hq * D) * keys_per_seq;
    const std::string desc = std::to_string(S) + " x " + std::to_string(shape.new_tokens) + " new" +
                             (shape.cached_tokens ? " on " + std::to_string(shape.cached_tokens) + " cached" : "");
    nlohmann::json r = {{"op", shape.cached_tokens ? "append" : "prefill"}, {"backend", "cuda"}, {"device", device},
                        {"dtype", std::string(to_string(shape.dtype))}, {"kv_dtype", std::string(to_string(shape.kv_dtype))},
                        {"layout", std::string(to_string(shape.layout))}, {"page_size", P},
                        {"num_q_heads", Hq}, {"num_kv_heads", Hkv}, {"head_dim", D}, {"batch", S},
                        {"shape", shape.name}, {"seq_lens_desc", desc}, {"causal", shape.causal},
                        {"time_us_median", median(us)}, {"time_us_min", *std::min_element(us.begin(), us.end())},
                        {"iterations", config.iterations}};
    add_throughput(r, flops, ceiling);
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace pagedattn::bench
