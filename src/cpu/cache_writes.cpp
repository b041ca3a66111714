#include "cpu/cache_writes.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dense_pages.h"
#include "cpu/cpu_backend.h"
#include "cpu/row_convert.h"

namespace pagedattn::cpu {

namespace {
// Elements from dim d on that lie contiguously in one of a page tensor's (page, head, token)
// rows: the rest of the row for NHD and HND, of d's 16-byte chunk for vLLM's K, and 1 for
// vLLM's V, whose dims lie page_size apart.
std::int64_t dim_run(const detail::KVTensorAccess& t, std::int64_t d, std::int64_t head_dim) {
  if (t.dim_contiguous(head_dim)) return head_dim - d;
  if (t.elem_stride != 1) return 1;
  return std::min(t.chunk_len - d % t.chunk_len, head_dim - d);
}

// n elements of `size` bytes from src (contiguous) to dst, `stride` elements apart.
template <class T>
void scatter(std::byte* dst, const std::byte* src, std::int64_t n, std::int64_t stride) {
  for (std::int64_t i = 0; i < n; ++i) std::memcpy(dst + i * stride * sizeof(T), src + i * sizeof(T), sizeof(T));
}
void scatter_elements(std::byte* dst, const std::byte* src, std::int64_t n, std::int64_t stride, std::size_t size) {
  switch (size) {
    case 1: scatter<std::uint8_t>(dst, src, n, stride); break;
    case 2: scatter<std::uint16_t>(dst, src, n, stride); break;
    default: scatter<std::uint32_t>(dst, src, n, stride); break;
  }
}

// One (page, head, slot) row of a page tensor = `row` (head_dim elements of the cache's dtype,
// contiguous): contiguous runs copied whole, vLLM's V dims scattered by their stride.
void place_row(const detail::KVTensorAccess& dst, std::int64_t page, std::int64_t head, std::int64_t slot,
               const std::byte* row, std::int64_t head_dim, std::size_t esize) {
  const auto size = static_cast<std::int64_t>(esize);
  for (std::int64_t d = 0, run = 0; d < head_dim; d += run) {
    std::byte* at = dst.data + dst.offset(page, head, slot, d) * size;
    if (dst.elem_stride == 1) {
      run = dim_run(dst, d, head_dim);
      std::memcpy(at, row + d * size, static_cast<std::size_t>(run * size));
    } else {
      run = std::min(dst.chunk_len - d % dst.chunk_len, head_dim - d);
      scatter_elements(at, row + d * size, run, dst.elem_stride, esize);
    }
  }
}

// Per-thread scratch of write_rows: a row as f32 and in the cache's dtype.
struct RowScratch {
  std::vector<float> values;
  std::vector<std::byte> encoded;
};

// Token `token`'s rows of every head into slot `slot` of page `page`, in the cache's dtype.
void write_rows(const detail::KVCacheAccess& kv, const detail::KVTensorAccess& dst,
                const TokenRows& src, std::int64_t token, std::int64_t page, std::int64_t slot,
                bool k_side, RowScratch& scratch) {
  const std::size_t in_size = dtype_size(src.dtype), out_size = dtype_size(kv.dtype);
  const std::int64_t D = kv.head_dim;
  for (std::int64_t h = 0; h < kv.num_kv_heads; ++h) {
    const std::byte* in = src.data + (token * src.token_stride + h * src.head_stride) * static_cast<std::int64_t>(in_size);
    const std::byte* row = scratch.encoded.data();
    if (src.dtype == kv.dtype && src.dim_stride == 1) {
      row = in;  // already in the cache's encoding (for fp8: quantised)
    } else if (src.dtype == kv.dtype) {
      for (std::int64_t d = 0; d < D; ++d) {
        std::memcpy(scratch.encoded.data() + d * static_cast<std::int64_t>(in_size),
                    in + d * src.dim_stride * static_cast<std::int64_t>(in_size), in_size);
      }
    } else {
      float* values = scratch.values.data();
      if (src.dim_stride == 1) {
        load_scaled_row(in, src.dtype, D, 1.0f, values);
      } else {
        for (std::int64_t d = 0; d < D; ++d) values[d] = load_as_float(in, src.dtype, d * src.dim_stride);
      }
      // fp8 stores x / scale; other dtypes store x.
      const float inv = is_fp8(kv.dtype) ? 1.0f / (k_side ? kv.k_scale_of(h) : kv.v_scale_of(h)) : 1.0f;
      store_scaled_row(values, D, inv, kv.dtype, scratch.encoded.data());
    }
    place_row(dst, page, h, slot, row, D, out_size);
  }
}
}  // namespace

void append_kv(const detail::KVCacheAccess& kv, const TokenRows& k, const TokenRows& v,
               std::span<const std::int64_t> slots, int num_threads) {
  const auto n = static_cast<std::int64_t>(slots.size());
  const auto D = static_cast<std::size_t>(kv.head_dim);
#pragma omp parallel num_threads(resolve_num_threads(num_threads)) if (n > 256)
  {
    RowScratch scratch{std::vector<float>(D), std::vector<std::byte>(D * sizeof(float))};
#pragma omp for schedule(static)
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int64_t slot = slots[static_cast<std::size_t>(t)];
      if (slot < 0) continue;
      const std::int64_t page = slot / kv.page_size, offset = slot % kv.page_size;
      write_rows(kv, kv.k, k, t, page, offset, true, scratch);
      write_rows(kv, kv.v, v, t, page, offset, false, scratch);
    }
  }
}

void copy_blocks(const detail::KVCacheAccess& kv,
                 std::span<const std::pair<std::int64_t, std::int64_t>> mapping, int num_threads) {
  const auto esize = static_cast<std::int64_t>(dtype_size(kv.dtype));
  const std::int64_t page_elems = kv.page_size * kv.num_kv_heads * kv.head_dim;
  const auto n = static_cast<std::int64_t>(mapping.size());
  // Pages whose elements fill one dense block (every layout, stacked or not): one copy each.
  const bool k_dense = detail::dense_pages(kv.k, kv), v_dense = detail::dense_pages(kv.v, kv);
#pragma omp parallel for num_threads(resolve_num_threads(num_threads)) schedule(static) if (n > 8)
  for (std::int64_t i = 0; i < n; ++i) {
    const auto [src, dst] = mapping[static_cast<std::size_t>(i)];
    for (const detail::KVTensorAccess* t : {&kv.k, &kv.v}) {
      if (t == &kv.k ? k_dense : v_dense) {
        std::memcpy(t->data + t->offset(dst, 0, 0, 0) * esize, t->data + t->offset(src, 0, 0, 0) * esize,
                    static_cast<std::size_t>(page_elems * esize));
        continue;
      }
      for (std::int64_t h = 0; h < kv.num_kv_heads; ++h)
        for (std::int64_t tok = 0; tok < kv.page_size; ++tok)
          for (std::int64_t d = 0, run = 0; d < kv.head_dim; d += run) {
            // Contiguous runs whole; vLLM's V, whose dims lie page_size apart, element by element.
            run = dim_run(*t, d, kv.head_dim);
            std::memcpy(t->data + t->offset(dst, h, tok, d) * esize,
                        t->data + t->offset(src, h, tok, d) * esize, static_cast<std::size_t>(run * esize));
          }
    }
  }
}

void copy_page_runs(std::span<const detail::PageRun> runs) {
  for (const detail::PageRun& r : runs) {
    for (std::int64_t i = 0; i < r.pages; ++i) {
      std::memcpy(r.dst + i * r.dst_pitch, r.src + i * r.src_pitch, static_cast<std::size_t>(r.bytes));
    }
  }
}

}  // namespace pagedattn::cpu
