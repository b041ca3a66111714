#include <cstdio>
#include <vector>

#include "pagedattn/kv_cache_manager.h"
#include "pagedattn/ops.h"

int main() {
  using namespace pagedattn;
  // A pool of 64 pages x 16 tokens of bf16 K/V: 2 KV heads of dimension 64, NHD layout.
  const KVCacheSpec spec{.layout = KVLayout::kNHD, .dtype = DType::kBF16, .num_pages = 64,
                         .page_size = 16, .num_kv_heads = 2, .head_dim = 64};
  std::vector<std::uint16_t> k_pool(spec.elements_per_tensor()), v_pool(spec.elements_per_tensor());
  const PagedKV cache = spec.make_views(k_pool.data(), v_pool.data());
  KVCacheManager manager({.num_pages = 64, .page_size = 16});

  // A 40-token prompt: the manager reserves its slots, append_kv writes its K/V there.
  const SeqId seq = manager.add_sequence(std::vector<TokenId>(40, 7)).id;
  std::vector<float> k(40 * 2 * 64, 0.5f), v(40 * 2 * 64, 1.0f);
  std::vector<std::int64_t> slots;
  for (int t = 0; t < 40; ++t) slots.push_back(manager.slot(seq, t));
  const Context ctx = Context::cpu();
  append_kv(ctx, cache, TensorView(k.data(), DType::kF32, {40, 2, 64}),
            TensorView(v.data(), DType::kF32, {40, 2, 64}), TensorView(slots.data(), DType::kI64, {40}));
  manager.mark_computed(seq, 40);  // its full pages may now serve prefix hits

  // Decode one query token (8 query heads share the 2 KV heads) through the page table.
  BlockTableData table = manager.block_table(std::vector<SeqId>{seq});
  std::vector<float> q(8 * 64, 0.1f), out(8 * 64), lse(8);
  decode(ctx, TensorView(q.data(), DType::kF32, {1, 8, 64}), cache, table.view(), AttentionParams{},
         TensorView(out.data(), DType::kF32, {1, 8, 64}), TensorView(lse.data(), DType::kF32, {1, 8}));
  std::printf("out[0] = %.3f (expect 1.000), lse[0] = %.3f (expect ln 40 + 0.4 = 4.089)\n", out[0], lse[0]);
  manager.free(seq);
  return out[0] > 0.99f && out[0] < 1.01f ? 0 : 1;
}
