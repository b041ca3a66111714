// Paged prefill on the CPU: plans the work tiles and runs them on OpenMP threads.
//
// A tile is (sequence, KV head, up to kTileRows rows of query x head): the query heads of one
// GQA group share each K/V block the tile loads, so the group's heads times a block of queries
// form the M dimension of the two products. Tiles are ordered by decreasing estimated cost and
// handed out dynamically, which balances causal and ragged batches. Each tile owns its output
// rows, so results do not depend on the schedule.
#include <algorithm>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/prefill_tile.h"

namespace pagedattn::cpu {

namespace {

struct PlannedTile {
  PrefillTile tile;
  std::int64_t cost = 0;  // rows x keys it may attend, plus a per-row constant
};

// A tile of up to `rows` rows: query heads of one group, times queries.
struct TileShape {
  std::int64_t heads, queries;
};
TileShape tile_shape(std::int64_t group, std::int64_t rows) {
  const std::int64_t heads = std::min(group, rows);
  return {heads, std::max<std::int64_t>(1, rows / heads)};
}

// Rows (query x head) of the tiles: kTileRows where the batch still gives every thread two tiles,
// else halved down to kMinTileRows. Each K/V block a tile loads (copied, packed into pairs and
// transposed for the products) then serves more rows: 256-row tiles measured 0.86x the time of
// 64-row ones on 1 x 2048 causal GQA 32/8, 0.72x on appends of 512 onto 8192 cached tokens
// (docs/perf-notes.md).
std::int64_t choose_tile_rows(const detail::AttentionProblem& p, int threads) {
  const std::int64_t group = p.group_size();
  std::int64_t rows = kTileRows;
  for (; rows > kMinTileRows; rows /= 2) {
    const TileShape shape = tile_shape(group, rows);
    std::int64_t tiles = 0;
    for (std::int64_t s = 0; s < p.num_seqs; ++s) tiles += (p.q_end(s) - p.q_begin(s) + shape.queries - 1) / shape.queries;
    tiles *= p.num_kv_heads * ((group + shape.heads - 1) / shape.heads);
    if (tiles >= 2 * static_cast<std::int64_t>(threads)) break;
  }
  return rows;
}

std::vector<PlannedTile> plan_tiles(const detail::AttentionProblem& p, std::int64_t tile_rows) {
  const std::int64_t group = p.group_size();
  const TileShape shape = tile_shape(group, tile_rows);
  const std::int64_t heads_per_tile = shape.heads, queries_per_tile = shape.queries;
  const auto& var = p.variant;
  std::vector<PlannedTile> tiles;
  for (std::int64_t s = 0; s < p.num_seqs; ++s) {
    const std::int64_t n_q = p.q_end(s) - p.q_begin(s);
    if (n_q == 0) continue;
    const std::int64_t kv_len = p.pages_of(s).kv_len;
    const std::int64_t first_pos = p.query_end(s) - n_q - p.key_offset(s);  // relative to key 0
    for (std::int64_t i0 = 0; i0 < n_q; i0 += queries_per_tile) {
      const std::int64_t nq = std::min(queries_per_tile, n_q - i0);
      std::int64_t keys = kv_len;
      if (var.causal) keys = std::clamp<std::int64_t>(first_pos + i0 + nq, 0, kv_len);
      if (var.window_left >= 0) {
        keys -= std::clamp<std::int64_t>(first_pos + i0 - var.window_left, 0, keys);
      }
      for (std::int64_t kh = 0; kh < p.num_kv_heads; ++kh) {
        for (std::int64_t g0 = 0; g0 < group; g0 += heads_per_tile) {
          const std::int64_t nh = std::min(heads_per_tile, group - g0);
          tiles.push_back({{s, kh, g0, nh, i0, nq}, nh * nq * (keys + 16)});
        }
      }
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const PlannedTile& a, const PlannedTile& b) { return a.cost > b.cost; });
  return tiles;
}

// AVX512-BF16 products for bf16 q and a bf16 or fp8 KV (fp8 rows converted to bf16, which holds
// every fp8 value exactly), on AMX tiles where the CPU has them and head_dim allows
// (PAGEDATTN_CPU_AMX=0 keeps them on AVX512-BF16).
TileProducts tile_products(const detail::AttentionProblem& p) {
  static const bool bf16 = bf16_dot_supported();
  static const bool amx = amx_tiles_enabled();
  const bool kv_as_bf16 = p.kv.dtype == DType::kBF16 || is_fp8(p.kv.dtype);
  if (!bf16 || p.qo.q_dtype != DType::kBF16 || !kv_as_bf16) return TileProducts::kF32;
  if (amx && p.head_dim % 32 == 0) return TileProducts::kAmx;
  return prefill_bf16_on_fmas() ? TileProducts::kF32 : TileProducts::kBf16Dot;
}

}  // namespace

void prefill(const detail::AttentionProblem& p, int num_threads) {
  const int available = resolve_num_threads(num_threads);
  const std::vector<PlannedTile> tiles = plan_tiles(p, choose_tile_rows(p, available));
  const TileProducts products = tile_products(p);
  const auto count = static_cast<std::int64_t>(tiles.size());
  const int threads = static_cast<int>(std::min<std::int64_t>(available, count));
  if (threads <= 1) {
    TileScratch scratch(p.head_dim);
    for (const PlannedTile& t : tiles) run_prefill_tile(p, t.tile, products, scratch);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    TileScratch scratch(p.head_dim);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < count; ++i) {
      run_prefill_tile(p, tiles[static_cast<std::size_t>(i)].tile, products, scratch);
    }
  }
}

}  // namespace pagedattn::cpu
