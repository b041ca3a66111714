// append_kv on CUDA: scatter new tokens' K/V rows into their cache slots, in any layout,
// quantising to fp8 on write.
//
// One thread writes one run of 8 dims of one (token, head) row, of K and then of V; consecutive
// threads take consecutive runs of a row, so NHD/HND/vLLM-K stores are coalesced (vLLM's V
// layout keeps dims page_size apart, which no thread mapping can make contiguous). The bytes
// stored equal src/cpu/cache_writes.cpp's: the same conversions (pagedattn/dtype.h), the same
// x * (1 / scale) in round-to-nearest f32, and input of the cache's dtype copied unchanged.
#include <algorithm>

#include "cuda/cache_writes.h"
#include "cuda/cuda_check.h"
#include "cuda/element_bits.cuh"

namespace pagedattn::cuda {

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;  // the grid strides beyond this

struct AppendParams {
  detail::KVCacheAccess kv;   // device pointers
  TokenRows rows[2];          // [0] = k, [1] = v
  IndexView slots;            // [num_tokens]
  std::int64_t num_tokens = 0;
  // Input of the cache's dtype is stored bit for bit (for fp8 it is already quantised); any
  // other input is converted (fp8: x / scale), as on the CPU.
  bool raw[2] = {false, false};
  bool load_vec[2] = {false, false};   // a run of the input row is one aligned vector
  bool store_vec[2] = {false, false};  // a run of the cache row is one aligned vector
};

// x * inv as the CPU computes it: one IEEE round-to-nearest product (no contraction), and a NaN
// x comes back as itself, quietened, as x86 and Arm return it (the GPU would return its
// canonical NaN, losing the sign that fp8 encodes).
__device__ __forceinline__ float scale_as_host(float x, float inv) {
  return detail::is_nan_f(x) ? detail::bits_float(detail::float_bits(x) | 0x00400000u)
                             : __fmul_rn(x, inv);
}

__global__ void append_kv_kernel(const __grid_constant__ AppendParams prm) {
  const detail::KVCacheAccess& kv = prm.kv;
  const std::int64_t runs_per_row = kv.head_dim / kRun;
  const std::int64_t total = prm.num_tokens * kv.num_kv_heads * runs_per_row;
  const int out_size = static_cast<int>(dtype_size(kv.dtype));
  const bool fp8 = is_fp8(kv.dtype);
  for (std::int64_t idx = blockIdx.x * std::int64_t{kThreads} + threadIdx.x; idx < total;
       idx += std::int64_t{gridDim.x} * kThreads) {
    const std::int64_t run = idx % runs_per_row;
    const std::int64_t row = idx / runs_per_row;  // token * num_kv_heads + head
    const std::int64_t head = row % kv.num_kv_heads, token = row / kv.num_kv_heads;
    const std::int64_t slot = prm.slots.at(token);
    // -1: the token is not stored. A slot past the pool (a graph replayed with indices the host
    // copy did not hold) is not stored either, rather than written out of bounds.
    if (slot < 0 || slot >= kv.num_pages * kv.page_size) continue;
    const std::int64_t page = slot / kv.page_size, offset = slot % kv.page_size;
    const std::int64_t d0 = run * kRun;
#pragma unroll
    for (int side = 0; side < 2; ++side) {
      const TokenRows& src = prm.rows[side];
      const detail::KVTensorAccess& dst = side == 0 ? kv.k : kv.v;
      const int in_size = static_cast<int>(dtype_size(src.dtype));
      const std::byte* in_row = src.data + (token * src.token_stride + head * src.head_stride) * in_size;
      std::uint32_t bits[kRun];
      if (prm.load_vec[side]) {
        load_run(in_row + d0 * in_size, in_size, bits);
      } else {
#pragma unroll
        for (int j = 0; j < kRun; ++j) bits[j] = load_bits(in_row, in_size, (d0 + j) * src.dim_stride);
      }
      if (!prm.raw[side]) {
        // fp8 stores x / scale (as x * (1 / scale), like the CPU); other dtypes store x.
        const float inv = fp8 ? __fdiv_rn(1.0f, side == 0 ? kv.k_scale_of(head) : kv.v_scale_of(head)) : 1.0f;
#pragma unroll
        for (int j = 0; j < kRun; ++j) {
          bits[j] = encode_bits(kv.dtype, scale_as_host(decode_bits(src.dtype, bits[j]), inv));
        }
      }
      if (prm.store_vec[side]) {
        store_run(dst.data + dst.offset(page, head, offset, d0) * out_size, out_size, bits);
      } else {
#pragma unroll
        for (int j = 0; j < kRun; ++j) store_bits(dst.data, out_size, dst.offset(page, head, offset, d0 + j), bits[j]);
      }
    }
  }
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// A run of kRun dims of an input row is contiguous and vector-aligned for every token and head.
bool rows_vectorisable(const TokenRows& r) {
  const int esize = static_cast<int>(dtype_size(r.dtype));
  return r.dim_stride == 1 && r.token_stride % kRun == 0 && r.head_stride % kRun == 0 &&
         aligned(r.data, run_alignment(esize));
}

// The same for the cache: a run never straddles a vLLM chunk and starts on a vector boundary.
bool cache_vectorisable(const detail::KVTensorAccess& t, std::int64_t head_dim, DType dtype) {
  const int esize = static_cast<int>(dtype_size(dtype));
  return t.elem_stride == 1 && t.chunk_len % kRun == 0 && t.page_stride % kRun == 0 &&
         t.head_stride % kRun == 0 && t.token_stride % kRun == 0 &&
         (t.chunk_len == head_dim || t.chunk_stride % kRun == 0) && aligned(t.data, run_alignment(esize));
}

}  // namespace

void append_kv(const detail::KVCacheAccess& kv, const TokenRows& k, const TokenRows& v,
               const IndexView& slots, std::int64_t num_tokens, void* stream_ptr) {
  const std::int64_t total = num_tokens * kv.num_kv_heads * (kv.head_dim / kRun);
  if (total == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  AppendParams prm;
  prm.kv = kv;
  prm.rows[0] = k;
  prm.rows[1] = v;
  prm.slots = slots;
  prm.num_tokens = num_tokens;
  for (int side = 0; side < 2; ++side) {
    const TokenRows& src = prm.rows[side];
    const detail::KVTensorAccess& dst = side == 0 ? kv.k : kv.v;
    prm.raw[side] = src.dtype == kv.dtype;
    prm.load_vec[side] = rows_vectorisable(src);
    prm.store_vec[side] = cache_vectorisable(dst, kv.head_dim, kv.dtype);
  }
  const std::int64_t blocks = std::min((total + kThreads - 1) / kThreads, kMaxBlocks);
  append_kv_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(prm);
  check_launch("append_kv_kernel", stream);
}

}  // namespace pagedattn::cuda
