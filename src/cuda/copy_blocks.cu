// copy_blocks on CUDA: copy whole pages (K and V, every head) for each (src, dst) pair.
//
// Grid: x = pairs (strided), y = K or V, z = slices of a page. A page that is one dense block of
// memory (every layout, stacked or not, unless the views are unusually strided) is copied in
// the widest unit, up to 16 bytes, that its address, page stride and size allow; any other
// page element by element through KVTensorAccess. Validation guarantees that no page is both a
// source and a destination, so the blocks never race.
#include <algorithm>

#include "core/dense_pages.h"
#include "cuda/cache_writes.h"
#include "cuda/cuda_check.h"

namespace pagedattn::cuda {

namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kUnitsPerThread = 8;  // per slice: enough work to amortise the index loads
constexpr std::int64_t kMaxSlices = 256;
constexpr std::int64_t kMaxPairBlocks = 65535;

struct CopyParams {
  detail::KVTensorAccess t[2];  // [0] = k, [1] = v; device pointers
  IndexView mapping;            // [num_pairs, 2]
  std::int64_t num_pairs = 0;
  std::int64_t num_pages = 0, num_kv_heads = 0, page_size = 0, head_dim = 0;
  int esize = 1;
  int unit[2] = {0, 0};          // dense page: bytes per copied unit (16, 8, 4, 2, 1); 0 = not dense
  std::int64_t page_bytes = 0;   // of a dense page
};

template <class U>
__device__ __forceinline__ void copy_units(const std::byte* from, std::byte* to, std::int64_t n) {
  const U* src = reinterpret_cast<const U*>(from);
  U* dst = reinterpret_cast<U*>(to);
  for (std::int64_t i = blockIdx.z * std::int64_t{kThreads} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.z} * kThreads) {
    dst[i] = src[i];
  }
}

__global__ void copy_blocks_kernel(const __grid_constant__ CopyParams prm) {
  const detail::KVTensorAccess& t = prm.t[blockIdx.y];
  const int unit = prm.unit[blockIdx.y];
  const std::int64_t H = prm.num_kv_heads, P = prm.page_size, D = prm.head_dim;
  for (std::int64_t i = blockIdx.x; i < prm.num_pairs; i += gridDim.x) {
    const std::int64_t src = prm.mapping.at(i, 0), dst = prm.mapping.at(i, 1);
    // Pairs are checked on the host copy; a graph replayed with ids past the pool skips them
    // rather than copying out of bounds.
    if (src < 0 || dst < 0 || src >= prm.num_pages || dst >= prm.num_pages) continue;
    if (unit > 0) {
      const std::byte* from = t.data + t.offset(src, 0, 0, 0) * prm.esize;
      std::byte* to = t.data + t.offset(dst, 0, 0, 0) * prm.esize;
      const std::int64_t n = prm.page_bytes / unit;
      switch (unit) {
        case 16: copy_units<uint4>(from, to, n); break;
        case 8: copy_units<uint2>(from, to, n); break;
        case 4: copy_units<std::uint32_t>(from, to, n); break;
        case 2: copy_units<std::uint16_t>(from, to, n); break;
        default: copy_units<std::uint8_t>(from, to, n); break;
      }
      continue;
    }
    // Element e = (head, token, dim) in row-major order; both pages share the layout.
    for (std::int64_t e = blockIdx.z * std::int64_t{kThreads} + threadIdx.x; e < H * P * D;
         e += std::int64_t{gridDim.z} * kThreads) {
      const std::int64_t h = e / (P * D), tok = (e / D) % P, d = e % D;
      const std::byte* from = t.data + t.offset(src, h, tok, d) * prm.esize;
      std::byte* to = t.data + t.offset(dst, h, tok, d) * prm.esize;
      switch (prm.esize) {
        case 1: *reinterpret_cast<std::uint8_t*>(to) = *reinterpret_cast<const std::uint8_t*>(from); break;
        case 2: *reinterpret_cast<std::uint16_t*>(to) = *reinterpret_cast<const std::uint16_t*>(from); break;
        default: *reinterpret_cast<std::uint32_t*>(to) = *reinterpret_cast<const std::uint32_t*>(from); break;
      }
    }
  }
}

// The widest power-of-two unit (<= 16 bytes) dividing every dense page's address and size; 0
// when a page is not one dense block (detail::dense_pages, the CPU backend's test too, so both
// copy the same bytes).
int dense_unit(const detail::KVTensorAccess& t, const detail::KVCacheAccess& kv, std::int64_t esize) {
  if (!detail::dense_pages(t, kv)) return 0;
  const std::int64_t page_elems = kv.page_size * kv.num_kv_heads * kv.head_dim;
  const auto addr = reinterpret_cast<std::uintptr_t>(t.data);
  const auto stride_bytes = static_cast<std::uint64_t>(t.page_stride * esize);
  const auto size = static_cast<std::uint64_t>(page_elems * esize);
  int unit = 16;
  while (unit > 1 && (addr % unit != 0 || stride_bytes % unit != 0 || size % unit != 0)) unit /= 2;
  return unit;
}

}  // namespace

void copy_blocks(const detail::KVCacheAccess& kv, const IndexView& mapping, std::int64_t num_pairs,
                 void* stream_ptr) {
  if (num_pairs == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  CopyParams prm;
  prm.t[0] = kv.k;
  prm.t[1] = kv.v;
  prm.mapping = mapping;
  prm.num_pairs = num_pairs;
  prm.num_pages = kv.num_pages;
  prm.num_kv_heads = kv.num_kv_heads;
  prm.page_size = kv.page_size;
  prm.head_dim = kv.head_dim;
  prm.esize = static_cast<int>(dtype_size(kv.dtype));
  prm.page_bytes = kv.num_kv_heads * kv.page_size * kv.head_dim * prm.esize;
  std::int64_t most_units = 0;  // per page, over K and V: sizes the slices
  for (int side = 0; side < 2; ++side) {
    prm.unit[side] = dense_unit(prm.t[side], kv, prm.esize);
    const std::int64_t units = prm.unit[side] > 0 ? prm.page_bytes / prm.unit[side] : prm.page_bytes / prm.esize;
    most_units = std::max(most_units, units);
  }
  const std::int64_t slices =
      std::clamp<std::int64_t>(most_units / (kThreads * kUnitsPerThread), 1, kMaxSlices);
  const dim3 grid(static_cast<unsigned>(std::min(num_pairs, kMaxPairBlocks)), 2,
                  static_cast<unsigned>(slices));
  copy_blocks_kernel<<<grid, kThreads, 0, stream>>>(prm);
  check_launch("copy_blocks_kernel", stream);
}

}  // namespace pagedattn::cuda
