// The CPU prefill tile: flash-attention over paged KV for one tile (see prefill_tile.h), compiled
// for every Highway target. Rows (query x head) sit in lanes; for each block of keys (block_keys_for):
//   1. K rows are located through the page table (in place when already in the compute format,
//      else converted once into scratch) and S^T[key][row] = k . q_row;
//   2. the online softmax updates each row's running max / sum lane-wise and turns S^T into
//      weights P^T (masking only on blocks that straddle the causal diagonal or the window);
//   3. V rows are located the same way and O^T[dim][row] = O^T * alpha + sum_key P^T v.
// Products run in f32 FMAs here, or in the AVX512-BF16 micro-kernels when q and KV are bf16.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/prefill_tile.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/validate.h"
#include "cpu/exp_nonpositive-inl.h"
#include "cpu/kv_rows.h"
#include "cpu/prefill_tile.h"
#include "cpu/row_convert.h"

HWY_BEFORE_NAMESPACE();
namespace pagedattn::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
constexpr std::int64_t kStride = TileScratch::kRowsPad;

// dst[0, n) = a contiguous row of dtype t, decoded to f32 (fp8 unscaled).
void convert_row(const std::byte* src, DType t, std::int64_t n, float* dst) {
  const auto count = static_cast<std::size_t>(n);
  switch (t) {
    case DType::kF32: return convert_f32<DType::kF32>(src, count, dst);
    case DType::kF16: return convert_f32<DType::kF16>(src, count, dst);
    case DType::kBF16: return convert_f32<DType::kBF16>(src, count, dst);
    case DType::kF8E4M3: return convert_f32<DType::kF8E4M3>(src, count, dst);
    case DType::kF8E5M2: return convert_f32<DType::kF8E5M2>(src, count, dst);
    default: return;
  }
}

// dst [n][head_dim] = tokens [slot0, slot0 + n) of one page and head, any layout, as f32.
void gather_rows(const detail::KVTensorAccess& t, DType dtype, std::int64_t page,
                 std::int64_t head, std::int64_t slot0, std::int64_t n, std::int64_t head_dim,
                 float* dst) {
  switch (dtype) {
    case DType::kF32: return gather_rows_f32<DType::kF32>(t, page, head, slot0, n, head_dim, dst);
    case DType::kF16: return gather_rows_f32<DType::kF16>(t, page, head, slot0, n, head_dim, dst);
    case DType::kBF16: return gather_rows_f32<DType::kBF16>(t, page, head, slot0, n, head_dim, dst);
    case DType::kF8E4M3:
      return gather_rows_f32<DType::kF8E4M3>(t, page, head, slot0, n, head_dim, dst);
    case DType::kF8E5M2:
      return gather_rows_f32<DType::kF8E5M2>(t, page, head, slot0, n, head_dim, dst);
    default: return;
  }
}

// dst [n][head_dim] = raw bf16 tokens [slot0, slot0 + n) of one page and head of a layout whose
// dims are not contiguous: vLLM K (chunks of contiguous dims) or vLLM V (tokens contiguous).
void copy_rows_bf16(const detail::KVTensorAccess& t, std::int64_t page, std::int64_t head,
                    std::int64_t slot0, std::int64_t n, std::int64_t head_dim, std::uint16_t* dst) {
  const auto* base =
      reinterpret_cast<const std::uint16_t*>(t.data) + t.offset(page, head, slot0, 0);
  if (t.elem_stride == 1) {
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t c = 0; c < head_dim / t.chunk_len; ++c) {
        std::memcpy(dst + r * head_dim + c * t.chunk_len,
                    base + r * t.token_stride + c * t.chunk_stride,
                    static_cast<std::size_t>(t.chunk_len) * sizeof(std::uint16_t));
      }
    }
    return;
  }
  for (std::int64_t d = 0; d < head_dim; ++d) {
    const std::uint16_t* src =
        base + (d / t.chunk_len) * t.chunk_stride + (d % t.chunk_len) * t.elem_stride;
    for (std::int64_t r = 0; r < n; ++r) dst[r * head_dim + d] = src[r * t.token_stride];
  }
}

// dst [n][head_dim] = the bf16 of fp8 tokens [slot0, slot0 + n) of one page and head, any layout
// (fp8 unscaled, exact).
void fp8_rows_bf16(const detail::KVTensorAccess& t, DType dtype, std::int64_t page, std::int64_t head,
                   std::int64_t slot0, std::int64_t n, std::int64_t head_dim, std::uint16_t* dst) {
  const bool contiguous = t.dim_contiguous(head_dim);
  std::uint8_t codes[detail::kMaxHeadDim];
  for (std::int64_t r = 0; r < n; ++r) {
    const auto* row = reinterpret_cast<const std::uint8_t*>(t.data) + t.offset(page, head, slot0 + r, 0);
    if (!contiguous) {  // vLLM's split K (chunks of contiguous dims) or V (tokens contiguous)
      for (std::int64_t d = 0; d < head_dim; ++d) {
        codes[d] = row[(d / t.chunk_len) * t.chunk_stride + (d % t.chunk_len) * t.elem_stride];
      }
      row = codes;
    }
    fp8_to_bf16(row, dtype, head_dim, dst + r * head_dim);
  }
}

// Points rows[n] at keys [j0, j0 + count) of tensor `t`, KV head `head`, in the compute format:
// f32 rows (fp8 unscaled), or raw bf16 rows when `bf16` (bf16 caches, or fp8 ones converted
// exactly). Dim-contiguous rows already in that format are used in place; the others are
// converted, one page run at a time, into `scratch` ([kBlockKeys][head_dim] f32, or bf16 in its
// low half).
void locate_rows(const detail::KVCacheAccess& kv, const detail::KVTensorAccess& t,
                 const detail::SeqPages& pages, std::int64_t head, std::int64_t j0,
                 std::int64_t count, bool bf16, float* scratch, const void** rows) {
  const std::int64_t D = kv.head_dim, ps = kv.page_size;
  const auto esize = static_cast<std::int64_t>(dtype_size(kv.dtype));
  const bool in_place = t.dim_contiguous(D) && kv.dtype == (bf16 ? DType::kBF16 : DType::kF32);
  for (std::int64_t n = 0; n < count;) {
    const std::int64_t j = j0 + n;
    const std::int64_t page = pages.page(j / ps), slot = j % ps;
    const std::int64_t run = std::min(count - n, ps - slot);  // tokens left in this page
    if (in_place) {
      for (std::int64_t r = 0; r < run; ++r) {
        rows[n + r] = t.data + t.offset(page, head, slot + r, 0) * esize;
      }
    } else if (bf16) {
      auto* dst = reinterpret_cast<std::uint16_t*>(scratch) + n * D;
      if (is_fp8(kv.dtype)) fp8_rows_bf16(t, kv.dtype, page, head, slot, run, D, dst);
      else copy_rows_bf16(t, page, head, slot, run, D, dst);
      for (std::int64_t r = 0; r < run; ++r) rows[n + r] = dst + r * D;
    } else {
      float* dst = scratch + n * D;
      gather_rows(t, kv.dtype, page, head, slot, run, D, dst);
      for (std::int64_t r = 0; r < run; ++r) rows[n + r] = dst + r * D;
    }
    n += run;
  }
}

// ---- f32 products (rows in lanes, kVecs vectors of them) ------------------------------------

template <int kVecs, int kKeys>
void scores_f32(const float* q_t, std::int64_t D, const void* const* keys, std::int64_t num_keys,
                std::int64_t r0, float* s_t) {
  const DF df;
  const auto L = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t n0 = 0; n0 < num_keys; n0 += kKeys) {
    const float* k[kKeys];
    for (int n = 0; n < kKeys; ++n) k[n] = static_cast<const float*>(keys[n0 + n]);
    hn::Vec<DF> acc[kKeys][kVecs];
    for (int n = 0; n < kKeys; ++n) {
      for (int v = 0; v < kVecs; ++v) acc[n][v] = hn::Zero(df);
    }
    for (std::int64_t d = 0; d < D; ++d) {
      hn::Vec<DF> q[kVecs];
      for (int v = 0; v < kVecs; ++v) q[v] = hn::Load(df, q_t + d * kStride + r0 + v * L);
      for (int n = 0; n < kKeys; ++n) {
        const auto kb = hn::Set(df, k[n][d]);
        for (int v = 0; v < kVecs; ++v) acc[n][v] = hn::MulAdd(kb, q[v], acc[n][v]);
      }
    }
    for (int n = 0; n < kKeys; ++n) {
      for (int v = 0; v < kVecs; ++v) {
        hn::Store(acc[n][v], df, s_t + (n0 + n) * kStride + r0 + v * L);
      }
    }
  }
}

template <int kVecs, int kDims>
void accumulate_f32(const float* p_t, std::int64_t num_keys, const void* const* values,
                    std::int64_t D, const float* alpha, std::int64_t r0, float* o_t) {
  const DF df;
  const auto L = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t d0 = 0; d0 < D; d0 += kDims) {
    hn::Vec<DF> acc[kDims][kVecs];
    for (int v = 0; v < kVecs; ++v) {
      const auto a = hn::Load(df, alpha + r0 + v * L);
      for (int i = 0; i < kDims; ++i) {
        acc[i][v] = hn::Mul(hn::Load(df, o_t + (d0 + i) * kStride + r0 + v * L), a);
      }
    }
    for (std::int64_t n = 0; n < num_keys; ++n) {
      const float* vrow = static_cast<const float*>(values[n]) + d0;
      hn::Vec<DF> p[kVecs];
      for (int v = 0; v < kVecs; ++v) p[v] = hn::Load(df, p_t + n * kStride + r0 + v * L);
      for (int i = 0; i < kDims; ++i) {
        const auto vb = hn::Set(df, vrow[i]);
        for (int v = 0; v < kVecs; ++v) acc[i][v] = hn::MulAdd(vb, p[v], acc[i][v]);
      }
    }
    for (int i = 0; i < kDims; ++i) {
      for (int v = 0; v < kVecs; ++v) {
        hn::Store(acc[i][v], df, o_t + (d0 + i) * kStride + r0 + v * L);
      }
    }
  }
}

// Splits `rows` into chunks of up to four vectors and runs the matching instantiation.
// num_keys must be a multiple of 8 (padded with zero rows).
void scores_f32_rows(const float* q_t, std::int64_t D, const void* const* keys,
                     std::int64_t num_keys, std::int64_t rows, float* s_t) {
  const auto L = static_cast<std::int64_t>(hn::Lanes(DF()));
  std::int64_t r0 = 0;
  for (; r0 + 4 * L <= rows; r0 += 4 * L) scores_f32<4, 4>(q_t, D, keys, num_keys, r0, s_t);
  switch ((rows - r0) / L) {
    case 3: scores_f32<3, 4>(q_t, D, keys, num_keys, r0, s_t); break;
    case 2: scores_f32<2, 8>(q_t, D, keys, num_keys, r0, s_t); break;
    case 1: scores_f32<1, 8>(q_t, D, keys, num_keys, r0, s_t); break;
    default: break;
  }
}

void accumulate_f32_rows(const float* p_t, std::int64_t num_keys, const void* const* values,
                         std::int64_t D, const float* alpha, std::int64_t rows, float* o_t) {
  const auto L = static_cast<std::int64_t>(hn::Lanes(DF()));
  std::int64_t r0 = 0;
  for (; r0 + 4 * L <= rows; r0 += 4 * L) {
    accumulate_f32<4, 4>(p_t, num_keys, values, D, alpha, r0, o_t);
  }
  switch ((rows - r0) / L) {
    case 3: accumulate_f32<3, 4>(p_t, num_keys, values, D, alpha, r0, o_t); break;
    case 2: accumulate_f32<2, 8>(p_t, num_keys, values, D, alpha, r0, o_t); break;
    case 1: accumulate_f32<1, 8>(p_t, num_keys, values, D, alpha, r0, o_t); break;
    default: break;
  }
}

// ---- online softmax ---------------------------------------------------------------------------

struct BlockVariant {
  float scale, soft_cap;
  bool alibi, causal, window;
  bool masked;                 // some (row, key) of the block may be masked
  std::int64_t first_key_pos;  // position of the block's first key
};

// How far a block's maximum may exceed a row's running max before the latter moves.
constexpr float kMaxSlack = 8.0f;

// Weights p0 (key 2n) and p1 (key 2n + 1), finite and non-negative, rounded to bf16 (nearest
// even) and paired as the bf16 products read them: p0 in the low half of each 32-bit lane.
template <class DU, class V>
HWY_INLINE hn::Vec<DU> bf16_weight_pairs(DU du, V p0, V p1) {
  const auto round = [du](V p) {
    const auto bits = hn::BitCast(du, p);
    return hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u))));
  };
  return hn::Or(hn::ShiftRight<16>(round(p0)), hn::And(round(p1), hn::Set(du, 0xffff0000u)));
}

// Turns the logits s_t[n][r] (n < num_keys) into weights exp(logit - new max) and updates the
// rows' running max / sum; row_alpha receives exp(old max - new max). The running max is the
// largest logit so far or at most kMaxSlack below it. Rows whose max is still -inf (nothing
// attended yet) keep weights 0 and alpha 0. The weights go back into s_t as f32, or, with
// p_pairs, straight out as bf16 key pairs [num_keys / 2][kStride] u32 (the sum still adds the
// unrounded weights), which spares the bf16 products a pass that read them back.
void softmax_block(const BlockVariant& b, std::int64_t num_keys, std::int64_t rows,
                   TileScratch& s, std::uint32_t* p_pairs) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const auto L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto neg_inf = hn::Set(df, detail::kNegInf);
  const auto scale = hn::Set(df, b.scale);
  const auto cap = hn::Set(df, b.soft_cap);
  const auto inv_cap = hn::Set(df, b.soft_cap > 0.0f ? 1.0f / b.soft_cap : 0.0f);
  const bool transform = b.soft_cap > 0.0f || b.alibi || b.masked;
  for (std::int64_t r = 0; r < rows; r += L) {
    float* col = s.s_t + r;
    auto block_max = neg_inf;
    if (!transform) {
      // Logits stay unscaled here (the exp pass scales them in its FMA): scale > 0, so the
      // scaled max is the max, scaled.
      for (std::int64_t n = 0; n < num_keys; ++n) block_max = hn::Max(block_max, hn::Load(df, col + n * kStride));
      block_max = hn::Mul(block_max, scale);
    } else {
      const auto pos = hn::Load(df, s.row_pos + r);
      const auto slope = hn::Load(df, s.row_slope + r);
      const auto pos_i = hn::Load(di, s.row_pos_i + r);
      const auto min_key = hn::Load(di, s.row_min_key + r);
      for (std::int64_t n = 0; n < num_keys; ++n) {
        auto x = hn::Mul(hn::Load(df, col + n * kStride), scale);
        const std::int64_t key_pos = b.first_key_pos + n;
        if (b.soft_cap > 0.0f) x = hn::Mul(cap, hn::Tanh(df, hn::Mul(x, inv_cap)));
        if (b.alibi) {
          x = hn::MulAdd(slope, hn::Sub(hn::Set(df, static_cast<float>(key_pos)), pos), x);
        }
        if (b.masked) {
          const auto kp = hn::Set(di, static_cast<std::int32_t>(key_pos));
          auto out = hn::Lt(kp, min_key);
          if (b.causal) out = hn::Or(out, hn::Gt(kp, pos_i));
          x = hn::IfThenElse(hn::RebindMask(df, out), neg_inf, x);
        }
        hn::Store(x, df, col + n * kStride);
        block_max = hn::Max(block_max, x);
      }
    }
    // The running max moves only when the block's exceeds it by more than kMaxSlack: below that
    // the weights stay under e^kMaxSlack (f32 and bf16 hold them, the sums too) and O^T needs
    // no rescale, which on AMX is a pass over all of it (docs/perf-notes.md).
    const auto old_max = hn::Load(df, s.row_max + r);
    const auto grows = hn::Gt(block_max, hn::Add(old_max, hn::Set(df, kMaxSlack)));
    const auto new_max = hn::IfThenElse(grows, hn::Max(old_max, block_max), old_max);
    const auto base = hn::IfThenZeroElse(hn::Eq(new_max, neg_inf), new_max);
    // old_max - base <= 0 (-inf - base and -inf - 0 give 0); the logits less base are at most
    // kMaxSlack, inside exp_nonpositive's range.
    const auto alpha = exp_nonpositive(df, hn::Sub(old_max, base));
    auto sum = hn::Zero(df);
    const auto x_scale = transform ? hn::Set(df, 1.0f) : scale;  // what the first pass left unscaled
    const auto neg_base = hn::Neg(base);
    const auto weight = [&](std::int64_t n) {
      return exp_nonpositive(df, hn::MulAdd(hn::Load(df, col + n * kStride), x_scale, neg_base));
    };
    if (p_pairs != nullptr) {
      const hn::RebindToUnsigned<DF> du;
      for (std::int64_t n = 0; n < num_keys; n += 2) {
        const auto p0 = weight(n);
        const auto p1 = n + 1 < num_keys ? weight(n + 1) : hn::Zero(df);
        sum = hn::Add(sum, hn::Add(p0, p1));
        hn::Store(bf16_weight_pairs(du, p0, p1), du, p_pairs + (n / 2) * kStride + r);
      }
    } else {
      for (std::int64_t n = 0; n < num_keys; ++n) {
        const auto p = weight(n);
        hn::Store(p, df, col + n * kStride);
        sum = hn::Add(sum, p);
      }
    }
    hn::Store(hn::MulAdd(hn::Load(df, s.row_sum + r), alpha, sum), df, s.row_sum + r);
    hn::Store(new_max, df, s.row_max + r);
    hn::Store(alpha, df, s.row_alpha + r);
  }
}

// ---- the tile -------------------------------------------------------------------------------

// Keys per softmax step: the AMX products load and store their C tiles of O^T once per block,
// and a store waits for its products, so they take kBlockKeys (docs/perf-notes.md).
std::int64_t block_keys_for(TileProducts products) {
  return products == TileProducts::kAmx ? kBlockKeys : kSmallBlockKeys;
}

void RunTileImpl(const detail::AttentionProblem& p, const PrefillTile& tile, TileProducts products,
                 TileScratch& s) {
  const bool bf16_dot = products != TileProducts::kF32;
  const auto& kv = p.kv;
  const auto& qo = p.qo;
  const auto& var = p.variant;
  const std::int64_t D = p.head_dim;
  const std::int64_t rows = tile.num_heads * tile.num_queries;
  const std::int64_t rows_pad = (rows + kRowAlign - 1) / kRowAlign * kRowAlign;
  const detail::SeqPages pages = p.pages_of(tile.seq);
  const std::int64_t q0 = p.q_begin(tile.seq), n_q = p.q_end(tile.seq) - q0;
  const std::int64_t key_offset = p.key_offset(tile.seq);
  const std::int64_t first_pos = p.query_end(tile.seq) - n_q;  // position of query 0
  const auto qsize = static_cast<std::int64_t>(dtype_size(qo.q_dtype));
  const auto osize = static_cast<std::int64_t>(dtype_size(qo.out_dtype));
  const std::int64_t head0 = tile.kv_head * p.group_size() + tile.head_begin;

  // Rows r = query * num_heads + head; padded rows repeat the last real row with zero q.
  std::fill_n(s.q_t, D * kStride, 0.0f);
  const std::byte* q_rows[kStride];
  for (std::int64_t r = 0; r < rows_pad; ++r) {
    const std::int64_t rr = std::min(r, rows - 1);
    const std::int64_t i = tile.query_begin + rr / tile.num_heads, h = head0 + rr % tile.num_heads;
    const std::int64_t pos = first_pos + i;
    s.row_pos[r] = static_cast<float>(pos);
    s.row_pos_i[r] = static_cast<std::int32_t>(pos);
    s.row_min_key[r] = var.window_left >= 0 ? static_cast<std::int32_t>(pos - var.window_left)
                                            : std::numeric_limits<std::int32_t>::min();
    s.row_slope[r] = var.alibi_slopes ? var.alibi_slopes[h] : 0.0f;
    s.row_max[r] = detail::kNegInf;
    s.row_sum[r] = 0.0f;
    q_rows[r] = qo.q + ((q0 + i) * qo.q_token_stride + h * qo.q_head_stride) * qsize;
  }
  // Q^T, 16 rows at a time so that each line of it is written whole (row by row, every one of
  // its D lines was touched once per row, from L2).
  for (std::int64_t r0 = 0; r0 < rows; r0 += kRowAlign) {
    const std::int64_t n = std::min(kRowAlign, rows - r0);
    if (bf16_dot) {
      auto* pairs = reinterpret_cast<std::uint32_t*>(s.q_t) + r0;
      for (std::int64_t d = 0; d < D / 2; ++d) {
        for (std::int64_t j = 0; j < n; ++j) std::memcpy(pairs + d * kStride + j, q_rows[r0 + j] + 4 * d, 4);
      }
    } else {
      for (std::int64_t j = 0; j < n; ++j) convert_row(q_rows[r0 + j], qo.q_dtype, D, s.k_rows + j * D);
      for (std::int64_t d = 0; d < D; ++d) {
        for (std::int64_t j = 0; j < n; ++j) s.q_t[d * kStride + r0 + j] = s.k_rows[j * D + d];
      }
    }
  }
  std::fill_n(s.o_t, D * kStride, 0.0f);

  // Keys [j_begin, j_end) can be attended by some row of the tile.
  const std::int64_t min_pos = first_pos + tile.query_begin;
  const std::int64_t max_pos = min_pos + tile.num_queries - 1;
  std::int64_t j_begin = 0, j_end = pages.kv_len;
  if (var.causal) j_end = std::min(j_end, max_pos - key_offset + 1);
  if (var.window_left >= 0) {
    j_begin = std::max<std::int64_t>(0, min_pos - var.window_left - key_offset);
  }
  // fp8 scales fold into the logit scale and the output normalisation.
  const float k_scale = is_fp8(kv.dtype) ? kv.k_scale_of(tile.kv_head) : 1.0f;
  const float v_scale = is_fp8(kv.dtype) ? kv.v_scale_of(tile.kv_head) : 1.0f;

  BlockVariant b{var.scale * k_scale, var.soft_cap, var.alibi_slopes != nullptr, var.causal,
                 var.window_left >= 0, false, 0};
  if (products == TileProducts::kAmx) amx_tiles_begin();
  const std::int64_t block_keys = block_keys_for(products);
  for (std::int64_t j0 = j_begin; j0 < j_end; j0 += block_keys) {
    const std::int64_t nb = std::min(block_keys, j_end - j0);
    const std::int64_t nb_pad = (nb + 7) / 8 * 8;
    b.first_key_pos = key_offset + j0;
    b.masked = (var.causal && b.first_key_pos + nb - 1 > min_pos) ||
               (var.window_left >= 0 && b.first_key_pos < max_pos - var.window_left);

    locate_rows(kv, kv.k, pages, tile.kv_head, j0, nb, bf16_dot, s.k_rows, s.key_ptrs);
    std::fill(s.key_ptrs + nb, s.key_ptrs + nb_pad, s.zero_row);
    if (products == TileProducts::kAmx) {
      amx_scores(reinterpret_cast<const std::uint32_t*>(s.q_t), rows_pad, kStride, D,
                 reinterpret_cast<const std::uint16_t* const*>(s.key_ptrs), nb_pad, s.key_block, s.s_t);
    } else if (bf16_dot) {
      bf16_scores(reinterpret_cast<const std::uint32_t*>(s.q_t), rows_pad, kStride, D,
                  reinterpret_cast<const std::uint16_t* const*>(s.key_ptrs), nb_pad, s.s_t);
    } else {
      scores_f32_rows(s.q_t, D, s.key_ptrs, nb_pad, rows_pad, s.s_t);
    }

    auto* p_pairs = reinterpret_cast<std::uint32_t*>(s.p_pairs);
    softmax_block(b, nb, rows_pad, s, bf16_dot ? p_pairs : nullptr);

    locate_rows(kv, kv.v, pages, tile.kv_head, j0, nb, bf16_dot, s.v_rows, s.value_ptrs);
    if (bf16_dot) {
      auto* v_pairs = reinterpret_cast<std::uint32_t*>(s.v_pairs);
      bf16_pack_value_pairs(reinterpret_cast<const std::uint16_t* const*>(s.value_ptrs), nb, D,
                            v_pairs);
      if (products == TileProducts::kAmx) {
        amx_accumulate(p_pairs, v_pairs, (nb + 1) / 2, rows_pad, kStride, D, s.row_alpha, s.o_t, s.v_t);
      } else {
        bf16_accumulate(p_pairs, v_pairs, (nb + 1) / 2, rows_pad, kStride, D, s.row_alpha, s.o_t);
      }
    } else {
      accumulate_f32_rows(s.s_t, nb, s.value_ptrs, D, s.row_alpha, rows_pad, s.o_t);
    }
  }

  if (products == TileProducts::kAmx) amx_tiles_end();

  // out = O / sum (with the sink's exp in the sum); lse = max + log(sum). O^T's rows go out 16 at
  // a time, gathered into rows so that each line of O^T is read once, then converted on vectors
  // (element by element, the dtype switch per element had cost ~6% of a 1 x 2048 prefill).
  for (std::int64_t r0 = 0; r0 < rows; r0 += kRowAlign) {
    const std::int64_t n = std::min(kRowAlign, rows - r0);
    float* o = s.k_rows;  // [n][D]
    for (std::int64_t d = 0; d < D; ++d) {
      for (std::int64_t j = 0; j < n; ++j) o[j * D + d] = s.o_t[d * kStride + r0 + j];
    }
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t r = r0 + j;
      const std::int64_t i = tile.query_begin + r / tile.num_heads, h = head0 + r % tile.num_heads;
      float m = s.row_max[r], l = s.row_sum[r];
      float lse = detail::kNegInf, inv = 0.0f;
      if (var.sinks != nullptr) {
        const float sink = var.sinks[h];
        const float m_all = std::max(m, sink);
        const float keep = l > 0.0f ? std::exp(m - m_all) : 0.0f;
        l = l * keep + std::exp(sink - m_all);
        inv = keep / l * v_scale;
        lse = m_all + std::log(l);
      } else if (l > 0.0f) {
        inv = v_scale / l;
        lse = m + std::log(l);
      }
      std::byte* orow = qo.out + ((q0 + i) * qo.out_token_stride + h * qo.out_head_stride) * osize;
      store_scaled_row(o + j * D, D, inv, qo.out_dtype, orow);
      if (qo.lse != nullptr) qo.lse[(q0 + i) * qo.lse_token_stride + h * qo.lse_head_stride] = lse;
    }
  }
}

}  // namespace pagedattn::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pagedattn::cpu {

HWY_EXPORT(RunTileImpl);

void run_prefill_tile(const detail::AttentionProblem& p, const PrefillTile& tile, TileProducts products,
                      TileScratch& scratch) {
  HWY_DYNAMIC_DISPATCH(RunTileImpl)(p, tile, products, scratch);
}

namespace {
// Floats, rounded up to whole 64-byte lines so that every array starts aligned.
std::int64_t lines(std::int64_t floats) { return (floats + 15) / 16 * 16; }
}  // namespace

TileScratch::TileScratch(std::int64_t dim) : head_dim(dim) {
  const std::int64_t rows = kRowsPad, keys = kBlockKeys;
  const std::int64_t sizes[] = {dim * rows, dim * rows, keys * rows, keys / 2 * rows,
                                keys * dim, keys * dim, keys / 2 * dim, dim,
                                rows, rows, rows, rows, rows, rows, rows, keys * dim / 2, keys / 2 * dim};
  std::int64_t total = 0;
  for (std::int64_t n : sizes) total += lines(n);
  buffer = hwy::AllocateAligned<float>(static_cast<std::size_t>(total));
  std::fill_n(buffer.get(), total, 0.0f);
  float* next = buffer.get();
  float** const targets[] = {&q_t, &o_t, &s_t, &p_pairs, &k_rows, &v_rows, &v_pairs, &zero_row,
                             &row_max, &row_sum, &row_alpha, &row_pos, &row_slope};
  std::size_t k = 0;
  for (float** t : targets) {
    *t = next;
    next += lines(sizes[k++]);
  }
  row_pos_i = reinterpret_cast<std::int32_t*>(next);
  next += lines(sizes[k++]);
  row_min_key = reinterpret_cast<std::int32_t*>(next);
  next += lines(sizes[k++]);
  key_block = reinterpret_cast<std::uint16_t*>(next);
  next += lines(sizes[k++]);
  v_t = reinterpret_cast<std::uint32_t*>(next);
}

}  // namespace pagedattn::cpu
#endif  // HWY_ONCE
