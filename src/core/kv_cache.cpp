#include "pagedattn/kv_cache.h"

#include <string>

#include "core/validate.h"
#include "pagedattn/error.h"

namespace pagedattn {

std::string_view to_string(KVLayout layout) {
  switch (layout) {
    case KVLayout::kNHD: return "nhd";
    case KVLayout::kHND: return "hnd";
    case KVLayout::kVllmSplit: return "vllm";
  }
  return "?";
}

KVLayout parse_kv_layout(std::string_view name) {
  for (KVLayout l : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    if (to_string(l) == name) return l;
  }
  throw Error(ErrorCode::kInvalidArgument,
              "unknown KV layout '" + std::string(name) + "' (expected nhd, hnd or vllm)");
}

PagedKV PagedKV::from_stacked(const TensorView& kv, KVLayout layout) {
  check_arg(layout != KVLayout::kVllmSplit,
            "the vllm split layout has different K and V shapes and cannot be stacked");
  check_arg(kv.rank() == 5, "stacked kv has rank " + std::to_string(kv.rank()) +
                                ", expected 5 [num_pages, 2, ...]");
  check_arg(kv.size(1) == 2, "stacked kv dimension 1 is " + std::to_string(kv.size(1)) +
                                 ", expected 2 (K, V)");
  PagedKV out;
  out.layout = layout;
  out.k = kv.select(1, 0);
  out.v = kv.select(1, 1);
  return out;
}

std::array<std::int64_t, 5> KVCacheSpec::k_shape() const {
  switch (layout) {
    case KVLayout::kNHD: return {num_pages, page_size, num_kv_heads, head_dim, 0};
    case KVLayout::kHND: return {num_pages, num_kv_heads, page_size, head_dim, 0};
    case KVLayout::kVllmSplit: {
      const std::int64_t x = vllm_split_x(dtype);
      return {num_pages, num_kv_heads, head_dim / x, page_size, x};
    }
  }
  return {};
}

std::array<std::int64_t, 5> KVCacheSpec::v_shape() const {
  if (layout == KVLayout::kVllmSplit) return {num_pages, num_kv_heads, head_dim, page_size, 0};
  return k_shape();
}

PagedKV KVCacheSpec::make_views(void* k_data, void* v_data, Device device) const {
  check_arg(num_pages >= 0 && page_size >= 1 && num_kv_heads >= 1,
            "KVCacheSpec needs num_pages >= 0, page_size >= 1 and num_kv_heads >= 1");
  detail::check_head_dim(head_dim, "KVCacheSpec");
  check_arg(is_float(dtype), "KVCacheSpec dtype must be a float type");
  check_arg(layout != KVLayout::kVllmSplit || head_dim % vllm_split_x(dtype) == 0,
            "head_dim " + std::to_string(head_dim) + " is not a multiple of the vllm layout's x = " +
                std::to_string(vllm_split_x(dtype)) + " for " + std::string(to_string(dtype)));
  check_arg(num_pages == 0 || (k_data != nullptr && v_data != nullptr),
            "KVCacheSpec::make_views: k_data and v_data must not be null for a cache of " +
                std::to_string(num_pages) + " pages");
  const auto k = k_shape();
  const auto v = v_shape();
  PagedKV kv;
  kv.layout = layout;
  kv.k = layout == KVLayout::kVllmSplit
             ? TensorView(k_data, dtype, {k[0], k[1], k[2], k[3], k[4]}, device)
             : TensorView(k_data, dtype, {k[0], k[1], k[2], k[3]}, device);
  kv.v = TensorView(v_data, dtype, {v[0], v[1], v[2], v[3]}, device);
  return kv;
}

KVCacheSpec KVCacheSpec::from_views(const PagedKV& kv) {
  const Context ctx{kv.k.device()};
  const detail::KVCacheAccess a = detail::resolve_cache(ctx, kv);
  return {kv.layout, a.dtype, a.num_pages, a.page_size, a.num_kv_heads, a.head_dim};
}

}  // namespace pagedattn
