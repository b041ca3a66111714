// append_kv and copy_blocks: validate, then dispatch to the context's device.
//
// The index values (slots, page pairs) are validated on the host: on the CPU from the op's own
// tensor, on CUDA from the caller's host copy (options), so a GPU call never reads device
// memory from the host and stays capturable in a CUDA graph.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/backend_select.h"
#include "core/validate.h"
#include "cpu/cache_writes.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

#if PAGEDATTN_WITH_CUDA
#include "cuda/cache_writes.h"
#include "cuda/scoped_device.h"
#endif

namespace pagedattn {

namespace {
const std::initializer_list<DType> kIndexTypes = {DType::kI32, DType::kI64};

// Reads an i32/i64 index tensor element as int64.
std::int64_t index_at(const TensorView& t, std::int64_t offset) {
  return t.dtype() == DType::kI32 ? t.data_as<const std::int32_t>()[offset]
                                  : t.data_as<const std::int64_t>()[offset];
}

cpu::TokenRows rows_of(const TensorView& t) {
  return {static_cast<const std::byte*>(t.data()), t.dtype(), t.stride(0), t.stride(1), t.stride(2)};
}

// Checks index tensor `t` (on ctx's device) and returns the tensor to read its values from on
// the host: `t` itself on the CPU; on CUDA the required host copy, which must match `t` in
// dtype and shape (its strides may differ).
const TensorView& host_indices(const Context& ctx, const TensorView& t, const std::string& name,
                               const TensorView* host_copy, const std::string& option, int rank) {
  detail::check_tensor(ctx, t, name, kIndexTypes, rank);
  if (ctx.device.type == DeviceType::kCPU) return t;
  const std::string opt = "options." + option;
  check_arg(host_copy != nullptr, [&] {
    return opt + " is required on CUDA: a host copy of " + name + ", used to validate it without reading GPU memory";
  });
  detail::check_tensor(Context::cpu(), *host_copy, opt, kIndexTypes, rank);
  check_arg(host_copy->dtype() == t.dtype(), [&] {
    return opt + " has dtype " + std::string(to_string(host_copy->dtype())) + " but " + name + " has " +
           std::string(to_string(t.dtype()));
  });
  for (int d = 0; d < rank; ++d) detail::check_dim(*host_copy, opt, d, t.size(d), "as in " + name);
  return *host_copy;
}

// On CUDA: the kernels read the device tensor itself.
#if PAGEDATTN_WITH_CUDA
cuda::TokenRows device_rows(const TensorView& t) {
  return {static_cast<const std::byte*>(t.data()), t.dtype(), t.stride(0), t.stride(1), t.stride(2)};
}
cuda::IndexView device_indices(const TensorView& t) {
  return {t.data(), t.dtype(), t.stride(0), t.rank() > 1 ? t.stride(1) : 0};
}
#endif

// Rejects an input that lies in the cache the op writes: its values would be read while other
// threads overwrite them, and what is stored would depend on the order of the writes.
void check_apart_from_cache(const PagedKV& cache, std::initializer_list<detail::NamedView> inputs) {
  detail::check_apart(inputs, std::initializer_list<detail::NamedView>{{&cache.k, "cache.k (which the op writes)"},
                                                                        {&cache.v, "cache.v (which the op writes)"}});
}
}  // namespace

void append_kv(const Context& ctx, const PagedKV& cache, const TensorView& k, const TensorView& v,
               const TensorView& slot_mapping, const AppendKVOptions& options) {
  detail::require_backend(ctx, "append_kv");
  const detail::KVCacheAccess kv = detail::resolve_cache(ctx, cache);
  const std::initializer_list<DType> kTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                                   DType::kF8E4M3, DType::kF8E5M2};
  const TensorView& host_slots = host_indices(ctx, slot_mapping, "slot_mapping",
                                              options.host_slot_mapping, "host_slot_mapping", 1);
  const std::int64_t n = slot_mapping.size(0);
  for (auto [t, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    detail::check_tensor(ctx, *t, name, kTypes, 3);
    detail::check_dim(*t, name, 0, n, "num_tokens (slot_mapping length)");
    detail::check_dim(*t, name, 1, kv.num_kv_heads, "num_kv_heads");
    detail::check_dim(*t, name, 2, kv.head_dim, "head_dim");
  }
  check_apart_from_cache(cache, {{&k, "k"},
                                 {&v, "v"},
                                 {&slot_mapping, "slot_mapping"},
                                 {&cache.k_head_scales, "cache.k_head_scales"},
                                 {&cache.v_head_scales, "cache.v_head_scales"}});
  std::vector<std::int64_t> slots(static_cast<std::size_t>(n));
  std::set<std::int64_t> seen;
  const std::int64_t num_slots = kv.num_pages * kv.page_size;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t slot = index_at(host_slots, i * host_slots.stride(0));
    check_arg(slot >= -1 && slot < num_slots, [&] {
      return "slot_mapping[" + std::to_string(i) + "] is " + std::to_string(slot) +
          ", expected -1 or a slot in [0, " + std::to_string(num_slots) + ")";
    });
    check_arg(slot < 0 || seen.insert(slot).second, [&] {
      return "slot_mapping[" + std::to_string(i) + "] = " + std::to_string(slot) +
          " repeats an earlier slot (the write order would be undefined)";
    });
    slots[static_cast<std::size_t>(i)] = slot;
  }
  if (ctx.device.type == DeviceType::kCUDA) {
#if PAGEDATTN_WITH_CUDA
    const cuda::ScopedDevice on_device(ctx.device.index);
    cuda::append_kv(kv, device_rows(k), device_rows(v), device_indices(slot_mapping), n, ctx.stream);
#endif
    return;
  }
  cpu::append_kv(kv, rows_of(k), rows_of(v), slots, ctx.num_threads);
}

void copy_blocks(const Context& ctx, const PagedKV& cache, const TensorView& block_mapping,
                 const CopyBlocksOptions& options) {
  detail::require_backend(ctx, "copy_blocks");
  const detail::KVCacheAccess kv = detail::resolve_cache(ctx, cache);
  const TensorView& host_map = host_indices(ctx, block_mapping, "block_mapping",
                                            options.host_block_mapping, "host_block_mapping", 2);
  detail::check_dim(block_mapping, "block_mapping", 1, 2, "(src, dst)");
  check_apart_from_cache(cache, {{&block_mapping, "block_mapping"}});
  const std::int64_t n = block_mapping.size(0);
  std::vector<std::pair<std::int64_t, std::int64_t>> mapping(static_cast<std::size_t>(n));
  std::set<std::int64_t> sources, destinations;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t src = index_at(host_map, i * host_map.stride(0));
    const std::int64_t dst = index_at(host_map, i * host_map.stride(0) + host_map.stride(1));
    for (auto [id, what] : {std::pair{src, "src"}, std::pair{dst, "dst"}}) {
      check_arg(id >= 0 && id < kv.num_pages, [&] {
        return "block_mapping[" + std::to_string(i) + "] " + what + " page " + std::to_string(id) +
            " is out of range [0, " + std::to_string(kv.num_pages) + ")";
      });
    }
    check_arg(destinations.insert(dst).second, [&] {
      return "block_mapping[" + std::to_string(i) + "] writes page " + std::to_string(dst) + " a second time";
    });
    sources.insert(src);
    mapping[static_cast<std::size_t>(i)] = {src, dst};
  }
  for (std::int64_t d : destinations) {
    check_arg(!sources.contains(d), [&] {
      return "block_mapping uses page " + std::to_string(d) + " both as a source and as a destination";
    });
  }
  if (ctx.device.type == DeviceType::kCUDA) {
#if PAGEDATTN_WITH_CUDA
    const cuda::ScopedDevice on_device(ctx.device.index);
    cuda::copy_blocks(kv, device_indices(block_mapping), n, ctx.stream);
#endif
    return;
  }
  cpu::copy_blocks(kv, mapping, ctx.num_threads);
}

}  // namespace pagedattn
