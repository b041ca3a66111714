// pagedattn — the paged KV cache as the attention ops see it: a pool of pages holding keys and
// values, in one of three layouts.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "pagedattn/tensor.h"

namespace pagedattn {

enum class KVLayout : std::uint8_t {
  kNHD,        // K and V [num_pages, page_size, num_kv_heads, head_dim]
  kHND,        // K and V [num_pages, num_kv_heads, page_size, head_dim]
  kVllmSplit,  // K [num_pages, num_kv_heads, head_dim / x, page_size, x], x = 16 bytes of elements;
               // V [num_pages, num_kv_heads, head_dim, page_size]
};

std::string_view to_string(KVLayout layout);
// Parses "nhd|hnd|vllm" (as printed by to_string); throws Error otherwise.
KVLayout parse_kv_layout(std::string_view name);

// Elements per 16-byte chunk of the vLLM split K layout for `dtype` (8 for bf16, 16 for fp8).
constexpr std::int64_t vllm_split_x(DType dtype) {
  return 16 / static_cast<std::int64_t>(dtype_size(dtype));
}

// The K and V tensors of the cache plus the dequantisation scales used by fp8 caches
// (stored value = round(x / scale); read value = stored * scale). Scales are ignored for
// non-fp8 caches. Per-head scales, when given, replace the per-tensor ones.
struct PagedKV {
  KVLayout layout = KVLayout::kNHD;
  TensorView k;
  TensorView v;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  TensorView k_head_scales;  // optional f32 [num_kv_heads]
  TensorView v_head_scales;  // optional f32 [num_kv_heads]

  // Separate K/V views over one stacked tensor [num_pages, 2, ...] (NHD or HND: the inner
  // dimensions are that layout's per-page shape). The vLLM split layout cannot be stacked
  // because its K and V shapes differ.
  static PagedKV from_stacked(const TensorView& kv, KVLayout layout);
};

// The geometry of a cache, and the shapes its K and V tensors must have. Handy for allocating
// a cache; the ops derive the same numbers from the views and check them.
struct KVCacheSpec {
  KVLayout layout = KVLayout::kNHD;
  DType dtype = DType::kBF16;
  std::int64_t num_pages = 0;
  std::int64_t page_size = 16;
  std::int64_t num_kv_heads = 1;
  std::int64_t head_dim = 128;

  std::array<std::int64_t, 5> k_shape() const;  // rank 4 for NHD/HND (5th entry 0), 5 for vLLM
  std::array<std::int64_t, 5> v_shape() const;  // rank 4 (5th entry 0)
  std::int64_t elements_per_tensor() const { return num_pages * page_size * num_kv_heads * head_dim; }
  std::int64_t bytes_per_tensor() const {
    return elements_per_tensor() * static_cast<std::int64_t>(dtype_size(dtype));
  }
  // Contiguous views over caller-owned buffers of bytes_per_tensor() bytes each.
  PagedKV make_views(void* k_data, void* v_data, Device device = Device::cpu()) const;
  // Reads the geometry back from a cache's views (validating them); throws Error if inconsistent.
  static KVCacheSpec from_views(const PagedKV& kv);
};

}  // namespace pagedattn
