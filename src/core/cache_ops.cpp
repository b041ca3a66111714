// append_kv and copy_blocks: validate, then dispatch.
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/backend_select.h"
#include "core/validate.h"
#include "cpu/cache_writes.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {

namespace {
// Reads an i32/i64 index tensor element as int64.
std::int64_t index_at(const TensorView& t, std::int64_t offset) {
  return t.dtype() == DType::kI32 ? t.data_as<const std::int32_t>()[offset]
                                  : t.data_as<const std::int64_t>()[offset];
}

cpu::TokenRows rows_of(const TensorView& t) {
  return {static_cast<const std::byte*>(t.data()), t.dtype(), t.stride(0), t.stride(1), t.stride(2)};
}
}  // namespace

void append_kv(const Context& ctx, const PagedKV& cache, const TensorView& k, const TensorView& v,
               const TensorView& slot_mapping) {
  detail::require_backend(ctx, "append_kv");
  const detail::KVCacheAccess kv = detail::resolve_cache(ctx, cache);
  const std::initializer_list<DType> kTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                                   DType::kF8E4M3, DType::kF8E5M2};
  detail::check_tensor(ctx, slot_mapping, "slot_mapping", {DType::kI32, DType::kI64}, 1);
  const std::int64_t n = slot_mapping.size(0);
  for (auto [t, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}}) {
    detail::check_tensor(ctx, *t, name, kTypes, 3);
    detail::check_dim(*t, name, 0, n, "num_tokens (slot_mapping length)");
    detail::check_dim(*t, name, 1, kv.num_kv_heads, "num_kv_heads");
    detail::check_dim(*t, name, 2, kv.head_dim, "head_dim");
  }
  std::vector<std::int64_t> slots(static_cast<std::size_t>(n));
  std::set<std::int64_t> seen;
  const std::int64_t num_slots = kv.num_pages * kv.page_size;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t slot = index_at(slot_mapping, i * slot_mapping.stride(0));
    check_arg(slot >= -1 && slot < num_slots,
              "slot_mapping[" + std::to_string(i) + "] is " + std::to_string(slot) +
                  ", expected -1 or a slot in [0, " + std::to_string(num_slots) + ")");
    check_arg(slot < 0 || seen.insert(slot).second,
              "slot_mapping[" + std::to_string(i) + "] = " + std::to_string(slot) +
                  " repeats an earlier slot (the write order would be undefined)");
    slots[static_cast<std::size_t>(i)] = slot;
  }
  cpu::append_kv(kv, rows_of(k), rows_of(v), slots, ctx.num_threads);
}

void copy_blocks(const Context& ctx, const PagedKV& cache, const TensorView& block_mapping) {
  detail::require_backend(ctx, "copy_blocks");
  const detail::KVCacheAccess kv = detail::resolve_cache(ctx, cache);
  detail::check_tensor(ctx, block_mapping, "block_mapping", {DType::kI32, DType::kI64}, 2);
  detail::check_dim(block_mapping, "block_mapping", 1, 2, "(src, dst)");
  const std::int64_t n = block_mapping.size(0);
  std::vector<std::pair<std::int64_t, std::int64_t>> mapping(static_cast<std::size_t>(n));
  std::set<std::int64_t> sources, destinations;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t src = index_at(block_mapping, i * block_mapping.stride(0));
    const std::int64_t dst =
        index_at(block_mapping, i * block_mapping.stride(0) + block_mapping.stride(1));
    for (auto [id, what] : {std::pair{src, "src"}, std::pair{dst, "dst"}}) {
      check_arg(id >= 0 && id < kv.num_pages,
                "block_mapping[" + std::to_string(i) + "] " + what + " page " +
                    std::to_string(id) + " is out of range [0, " + std::to_string(kv.num_pages) + ")");
    }
    check_arg(destinations.insert(dst).second,
              "block_mapping[" + std::to_string(i) + "] writes page " + std::to_string(dst) +
                  " a second time");
    sources.insert(src);
    mapping[static_cast<std::size_t>(i)] = {src, dst};
  }
  for (std::int64_t d : destinations) {
    check_arg(!sources.contains(d), "block_mapping uses page " + std::to_string(d) +
                                        " both as a source and as a destination");
  }
  cpu::copy_blocks(kv, mapping, ctx.num_threads);
}

}  // namespace pagedattn
