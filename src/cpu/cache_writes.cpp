#include "cpu/cache_writes.h"

#include <cstring>

#include "core/dense_pages.h"
#include "cpu/cpu_backend.h"

namespace pagedattn::cpu {

namespace {
void write_rows(const detail::KVCacheAccess& kv, const detail::KVTensorAccess& dst,
                const TokenRows& src, std::int64_t token, std::int64_t page, std::int64_t slot,
                bool k_side) {
  const auto in_size = static_cast<std::int64_t>(dtype_size(src.dtype));
  const auto out_size = static_cast<std::int64_t>(dtype_size(kv.dtype));
  for (std::int64_t h = 0; h < kv.num_kv_heads; ++h) {
    const std::byte* row = src.data + (token * src.token_stride + h * src.head_stride) * in_size;
    std::byte* base = dst.data;
    const std::int64_t first = dst.offset(page, h, slot, 0);
    if (src.dtype == kv.dtype && src.dim_stride == 1 && dst.dim_contiguous(kv.head_dim)) {
      std::memcpy(base + first * out_size, row, static_cast<std::size_t>(kv.head_dim * out_size));
      continue;
    }
    if (src.dtype == kv.dtype) {  // already in the cache's encoding (for fp8: quantised)
      for (std::int64_t d = 0; d < kv.head_dim; ++d) {
        std::memcpy(base + dst.offset(page, h, slot, d) * out_size, row + d * src.dim_stride * in_size,
                    static_cast<std::size_t>(out_size));
      }
      continue;
    }
    // fp8 stores x / scale; other dtypes store x.
    const float inv = is_fp8(kv.dtype) ? 1.0f / (k_side ? kv.k_scale_of(h) : kv.v_scale_of(h)) : 1.0f;
    for (std::int64_t d = 0; d < kv.head_dim; ++d) {
      const float x = load_as_float(row, src.dtype, d * src.dim_stride);
      store_from_float(base, kv.dtype, dst.offset(page, h, slot, d), x * inv);
    }
  }
}
}  // namespace

void append_kv(const detail::KVCacheAccess& kv, const TokenRows& k, const TokenRows& v,
               std::span<const std::int64_t> slots, int num_threads) {
  const auto n = static_cast<std::int64_t>(slots.size());
#pragma omp parallel for num_threads(resolve_num_threads(num_threads)) schedule(static) if (n > 256)
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t slot = slots[static_cast<std::size_t>(t)];
    if (slot < 0) continue;
    const std::int64_t page = slot / kv.page_size, offset = slot % kv.page_size;
    write_rows(kv, kv.k, k, t, page, offset, true);
    write_rows(kv, kv.v, v, t, page, offset, false);
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
          for (std::int64_t d = 0; d < kv.head_dim; ++d)
            std::memcpy(t->data + t->offset(dst, h, tok, d) * esize,
                        t->data + t->offset(src, h, tok, d) * esize, static_cast<std::size_t>(esize));
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
