// Internal (CUDA, sm_90a): paged prefill / append on Hopper's warpgroup MMA (wgmma).
//
// A CTA takes 128 packed query rows of one sequence and one KV head (row i: query token
// i / group, head i % group, as in the mma.sync kernel) and is three warpgroups:
// - a producer gathers 128-key K and V tiles from the pages into a two-stage ring of swizzled
//   shared-memory tiles with cp.async (page tables are arbitrary, so no tensor-map copy), each
//   thread signalling a stage's "full" barrier when its copies land;
// - two consumers of 64 rows each compute S = Q K^T with wgmma (Q and K from shared memory),
//   the online softmax on the accumulators, and O += P V with wgmma (P from registers, V from
//   shared memory read MN-major), then release the stage on its "empty" barrier.
// The two consumers run out of phase, so one's softmax overlaps the other's matrix work.
// Register budgets are moved from the producer to the consumers with setmaxnreg.
#pragma once

#include "cuda/decode_kernel.cuh"
#include "cuda/mma_fragments.cuh"
#include "cuda/prefill_params.cuh"
#include "cuda/prefill_wgmma_launch.h"
#include "cuda/wgmma.cuh"

namespace pagedattn::cuda {

// T: bf16 or f16 (q and cache); kPlain: no soft-cap and no ALiBi. Grid as the mma.sync kernel:
// (packed row tile, KV head + num_kv_heads * split, sequence).
template <class T, bool kPlain>
__global__ void __launch_bounds__(WgmmaPrefillShape::kThreads, 1)
    paged_prefill_wgmma_kernel(const __grid_constant__ PrefillKernelParams prm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Shape = WgmmaPrefillShape;
  constexpr int kRows = Shape::kRows, kKeys = Shape::kKeys, kD = Shape::kD, kStages = Shape::kStages;
  constexpr float kNegInf = detail::kNegInf;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (sm90::smem_address(smem_raw) & 1023)) & 1023);
  unsigned char* s_q = smem;
  unsigned char* s_k = s_q + Shape::kQBytes;            // [stage]
  unsigned char* s_v = s_k + kStages * Shape::kTileBytes;  // [stage]
  auto* s_offsets = reinterpret_cast<longlong2*>(s_v + kStages * Shape::kTileBytes);
  auto* full_k = reinterpret_cast<std::uint64_t*>(s_offsets + kKeys);
  std::uint64_t* full_v = full_k + kStages;
  std::uint64_t* empty = full_v + kStages;

  const detail::AttentionProblem& p = prm.p;
  const std::int64_t s = blockIdx.z;
  const int kv_head = static_cast<int>(blockIdx.y % p.num_kv_heads);
  const auto split = static_cast<std::int64_t>(blockIdx.y / p.num_kv_heads);
  const int group = static_cast<int>(p.num_q_heads / p.num_kv_heads);
  const std::int64_t q0 = p.q_begin(s), n_q = p.q_end(s) - q0;
  // Tiles run from the last rows (most keys under the causal mask) to the first.
  const std::int64_t row0 = (static_cast<std::int64_t>(gridDim.x) - 1 - blockIdx.x) * kRows;
  if (row0 >= n_q * group) return;
  const detail::SeqPages pages = p.pages_of(s);
  const std::int64_t kv_len = pages.kv_len;
  const std::int64_t first_pos = p.query_end(s) - n_q - p.key_offset(s);  // of query token 0
  // Keys the CTA needs: up to its last row's position (causal), from its first row's window.
  const std::int64_t last_tok = min(n_q - 1, (row0 + kRows - 1) / group), first_tok = row0 / group;
  std::int64_t t_end = p.variant.causal ? min(kv_len, first_pos + last_tok + 1) : kv_len;
  std::int64_t t_begin = 0;
  if (p.variant.window_left >= 0) t_begin = max(std::int64_t{0}, first_pos + first_tok - p.variant.window_left);
  if (prm.split_tokens > 0) {
    t_begin = max(t_begin, split * prm.split_tokens);
    t_end = min(t_end, (split + 1) * prm.split_tokens);
  }
  const std::int64_t t_lo = t_begin - t_begin % kKeys;  // tiles start at multiples of kKeys
  const int n_tiles = t_begin < t_end ? static_cast<int>(ceil_div(t_end - t_lo, kKeys)) : 0;

  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      sm90::mbarrier_init(&full_k[st], 128);  // every producer thread, once its copies land
      sm90::mbarrier_init(&full_v[st], 128);
      sm90::mbarrier_init(&empty[st], 8);     // every consumer warp
    }
  }
  __syncthreads();
  const int warpgroup = threadIdx.x / 128, wt = threadIdx.x % 128;
  const int warp = wt / 32, lane = threadIdx.x & 31;

  if (warpgroup == 0) {
    // ---- producer: K and V tiles into the ring --------------------------------------------
    sm90::shrink_registers<Shape::kProducerRegs>();
    const detail::KVTensorAccess& ka = p.kv.k;
    const detail::KVTensorAccess& va = p.kv.v;
    const int chunk = lane & 15;  // the 16-byte chunk of a row this thread copies
    const T* k_base = reinterpret_cast<const T*>(ka.data) + ka.offset(0, kv_head, 0, chunk * 8);
    const T* v_base = reinterpret_cast<const T*>(va.data) + va.offset(0, kv_head, 0, chunk * 8);
    // The host checked that page and token strides fit 31 bits.
    const auto k_page_stride = static_cast<std::int32_t>(ka.page_stride), v_page_stride = static_cast<std::int32_t>(va.page_stride);
    const auto k_token_stride = static_cast<std::int32_t>(ka.token_stride), v_token_stride = static_cast<std::int32_t>(va.token_stride);
    const auto P = static_cast<std::uint32_t>(p.kv.page_size);
    // Each warp copies 32 rows of a tile: lane l finds row 32 * warp + l's page offsets, then
    // the warp copies two rows (16 lanes x 16 bytes each) per pass.
    longlong2* my_offsets = s_offsets + warp * 32;
    for (int j = 0; j < n_tiles; ++j) {
      const int stage = j % kStages;
      const std::int64_t t = t_lo + static_cast<std::int64_t>(j) * kKeys + warp * 32 + lane;
      longlong2 off = make_longlong2(-1, -1);
      if (t >= t_begin && t < t_end) {
        const auto key = static_cast<std::uint32_t>(t);
        const std::uint32_t page_idx = prm.page_div.div(key);
        const std::int32_t page = static_cast<std::int32_t>(pages.page(page_idx));
        const auto slot = static_cast<std::int32_t>(key - page_idx * P);
        off.x = static_cast<std::int64_t>(page) * k_page_stride + slot * k_token_stride;
        off.y = static_cast<std::int64_t>(page) * v_page_stride + slot * v_token_stride;
      }
      if (j >= kStages) sm90::mbarrier_wait(&empty[stage], ((j / kStages) + 1) & 1);
      __syncwarp();  // the warp's reads of the previous tile's offsets are done
      my_offsets[lane] = off;
      __syncwarp();
      const std::uint32_t k_dst = sm90::smem_address(s_k + stage * Shape::kTileBytes);
      const std::uint32_t v_dst = sm90::smem_address(s_v + stage * Shape::kTileBytes);
#pragma unroll 4
      for (int pass = 0; pass < 16; ++pass) {
        const int r = 2 * pass + (lane >> 4), row = warp * 32 + r;
        const std::int64_t o = my_offsets[r].x;  // outside the keys: zeros (masked, never NaN)
        sm90::cp_async_16_or_zeros(k_dst + sm90::swizzled_offset(row, chunk, kKeys), k_base + max(o, std::int64_t{0}), o >= 0);
      }
      sm90::mbarrier_arrive_on_copies(&full_k[stage]);
#pragma unroll 4
      for (int pass = 0; pass < 16; ++pass) {
        const int r = 2 * pass + (lane >> 4), row = warp * 32 + r;
        const std::int64_t o = my_offsets[r].y;
        sm90::cp_async_16_or_zeros(v_dst + sm90::swizzled_offset(row, chunk, kKeys), v_base + max(o, std::int64_t{0}), o >= 0);
      }
      sm90::mbarrier_arrive_on_copies(&full_v[stage]);
    }
    cp_async_wait<0>();
    return;
  }

  // ---- consumers: 64 rows each ---------------------------------------------------------------
  sm90::grow_registers<Shape::kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const std::int64_t wg_row0 = row0 + 64 * consumer;
  auto query_token = [&](std::int64_t i) -> std::int64_t { return prm.q_index ? prm.q_index[q0 + i] : q0 + i; };
  // Q rows into shared memory (16 threads per 256-byte row; dead rows zero).
  for (int i = wt; i < 64 * Shape::kChunks; i += 128) {
    const int r = i / Shape::kChunks, c = i % Shape::kChunks;
    const std::int64_t packed = wg_row0 + r, tok = packed / group;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (tok < n_q) {
      const std::int64_t head = kv_head * group + packed % group;
      v = *reinterpret_cast<const uint4*>(reinterpret_cast<const T*>(p.qo.q) + query_token(tok) * p.qo.q_token_stride +
                                          head * p.qo.q_head_stride + c * 8);
    }
    *reinterpret_cast<uint4*>(s_q + sm90::swizzled_offset(64 * consumer + r, c, kRows)) = v;
  }
  sm90::fence_shared_for_async();
  sm90::named_barrier(1 + consumer, 128);

  const int gid = lane >> 2, tig = lane & 3;
  // This thread's rows: gid and gid + 8 of its warp's 16.
  int tok[2], pos[2], head[2];
  bool live[2];
  float slope[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const std::int64_t packed = wg_row0 + warp * 16 + gid + 8 * r;
    tok[r] = static_cast<int>(packed / group);
    head[r] = kv_head * group + static_cast<int>(packed % group);
    live[r] = tok[r] < n_q;
    pos[r] = static_cast<int>(first_pos + tok[r]);
    slope[r] = (live[r] && p.variant.alibi_slopes) ? p.variant.alibi_slopes[head[r]] : 0.0f;
  }
  // The warpgroup's key limits: tiles outside [wg_lo, wg_hi) are skipped; tiles inside
  // [open_lo, open_hi) are seen whole by every live row and need no mask.
  const bool wg_live = wg_row0 < n_q * group;
  const std::int64_t wg_first = wg_row0 / group, wg_last = min(n_q - 1, (wg_row0 + 63) / group);
  auto hi_of = [&](std::int64_t tk) { return p.variant.causal ? min(kv_len, first_pos + tk + 1) : kv_len; };
  auto lo_of = [&](std::int64_t tk) { return p.variant.window_left >= 0 ? first_pos + tk - p.variant.window_left : std::int64_t{0}; };
  const std::int64_t wg_hi = min(hi_of(wg_last), t_end), wg_lo = max(lo_of(wg_first), t_begin);
  const std::int64_t open_hi = min(hi_of(wg_first), t_end), open_lo = max(lo_of(wg_last), t_begin);

  const float s_mul = p.variant.scale * (kPlain ? kLog2e : 1.0f);
  const float soft_cap = p.variant.soft_cap;
  const std::uint32_t q_addr = sm90::smem_address(s_q) + 64 * consumer * 128;
  const std::uint32_t k_addr = sm90::smem_address(s_k), v_addr = sm90::smem_address(s_v);
  // K-major Q and K: k-step kk is 16 elements of column block kk / 4; V (MN-major): 16 keys.
  auto q_desc = [&](int kk) { return sm90::swizzled_descriptor(q_addr + (kk >> 2) * kRows * 128 + (kk & 3) * 32, 16); };
  auto k_desc = [&](int stage, int kk) {
    return sm90::swizzled_descriptor(k_addr + stage * Shape::kTileBytes + (kk >> 2) * kKeys * 128 + (kk & 3) * 32, 16);
  };
  auto v_desc = [&](int stage, int ks) {
    return sm90::swizzled_descriptor(v_addr + stage * Shape::kTileBytes + ks * 16 * 128, kKeys * 128);
  };

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  const int t_begin32 = static_cast<int>(t_begin), t_end32 = static_cast<int>(t_end);

  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j % kStages;
    const unsigned parity = (j / kStages) & 1;
    const std::int64_t ts = t_lo + static_cast<std::int64_t>(j) * kKeys;  // the tile's first key
    // Every consumer waits for every tile, so that its release counts in the right phase.
    sm90::mbarrier_wait(&full_k[stage], parity);
    if (wg_live && ts < wg_hi && ts + kKeys > wg_lo) {
      float sc[64];
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) sm90::wgmma_ss<T>(sc, q_desc(kk), k_desc(stage, kk), kk > 0);
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::fence_registers(sc);

      // Accumulator i * 4 + e: row gid + 8 * (e / 2), key ts + 8 * i + 2 * tig + e % 2.
      const bool open = ts >= open_lo && ts + kKeys <= open_hi;
      float rmax[2] = {kNegInf, kNegInf};
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const int dt = 8 * i + 2 * tig + (e & 1);
          // Plain logits stay unscaled here: the scale folds into the exponent's FFMA below.
          float x = sc[4 * i + e];
          if constexpr (!kPlain) {
            x *= s_mul;
            if (soft_cap > 0.0f) x = soft_cap * tanhf(x / soft_cap);
            x = (x + slope[r] * static_cast<float>(static_cast<int>(ts) + dt - pos[r])) * kLog2e;
          }
          if (!open) {  // positions fit 31 bits
            const int t = static_cast<int>(ts) + dt;
            bool ok = live[r] && t >= t_begin32 && t < t_end32;
            if (p.variant.causal) ok = ok && t <= pos[r];
            if (p.variant.window_left >= 0) ok = ok && t >= pos[r] - p.variant.window_left;
            x = ok ? x : kNegInf;
          }
          sc[4 * i + e] = x;
          rmax[r] = fmaxf(rmax[r], x);
        }
      }
      const float p_mul = kPlain ? s_mul : 1.0f;  // what still multiplies the stored logits
      float corr[2], m_sub[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        rmax[r] = fmaxf(rmax[r], __shfl_xor_sync(0xffffffffu, rmax[r], 1));
        rmax[r] = fmaxf(rmax[r], __shfl_xor_sync(0xffffffffu, rmax[r], 2));
        const float m_new = fmaxf(m[r], rmax[r] * p_mul);  // s_mul > 0 keeps the order
        corr[r] = m_new == kNegInf ? 1.0f : fast_exp2(m[r] - m_new);
        m[r] = m_new;
        l[r] *= corr[r];
        // A row with no key yet has m = -inf and only -inf logits: 2^(-inf - 0) = 0.
        m_sub[r] = m[r] == kNegInf ? 0.0f : m[r];
      }
      std::uint32_t pa[kKeys / 16][4];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          sc[4 * i + e] = fast_exp2(fmaf(sc[4 * i + e], p_mul, -m_sub[r]));
          l[r] += sc[4 * i + e];
        }
        o[4 * i] *= corr[0], o[4 * i + 1] *= corr[0];
        o[4 * i + 2] *= corr[1], o[4 * i + 3] *= corr[1];
      }
      // P as the A fragments of 16-key steps: n-blocks 2 ks and 2 ks + 1 of the accumulators.
#pragma unroll
      for (int ks = 0; ks < kKeys / 16; ++ks) {
        pa[ks][0] = pack2<T>(sc[8 * ks], sc[8 * ks + 1]);
        pa[ks][1] = pack2<T>(sc[8 * ks + 2], sc[8 * ks + 3]);
        pa[ks][2] = pack2<T>(sc[8 * ks + 4], sc[8 * ks + 5]);
        pa[ks][3] = pack2<T>(sc[8 * ks + 6], sc[8 * ks + 7]);
      }
      sm90::mbarrier_wait(&full_v[stage], parity);
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kKeys / 16; ++ks) sm90::wgmma_rs<T>(o, pa[ks], v_desc(stage, ks));
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::fence_registers(o);
    } else {
      sm90::mbarrier_wait(&full_v[stage], parity);
    }
    __syncwarp();
    if (lane == 0) sm90::mbarrier_arrive(&empty[stage]);
  }

  // Row sums were accumulated per lane: complete them across the quad.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
  std::byte* out = p.qo.out + split * prm.out_split_stride * out_size;
  float* lse = p.qo.lse ? p.qo.lse + split * prm.lse_split_stride : nullptr;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!live[r]) continue;
    float M = m[r], L = l[r];
    const float scale_o = fold_sink(p, head[r], M, L);
    const float inv = L > 0.0f ? scale_o / L : 0.0f;
    const std::int64_t q_tok = query_token(tok[r]);
    std::byte* o_row = out + (q_tok * p.qo.out_token_stride + head[r] * p.qo.out_head_stride) * out_size;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      store_one(o_row, p.qo.out_dtype, 8 * i + 2 * tig, o[4 * i + 2 * r] * inv);
      store_one(o_row, p.qo.out_dtype, 8 * i + 2 * tig + 1, o[4 * i + 2 * r + 1] * inv);
    }
    if (tig == 0 && lse) lse[q_tok * p.qo.lse_token_stride + head[r] * p.qo.lse_head_stride] = natural_lse(M, L);
  }
#endif
}

// Launches paged_prefill_wgmma_kernel<T> over `grid`. Instantiated in sm90a/prefill_wgmma_*.cu.
template <class T>
void launch_paged_prefill_wgmma(const PrefillKernelParams& prm, dim3 grid, cudaStream_t stream) {
  auto launch = [&](auto plain_c) {
    constexpr int kBytes = WgmmaPrefillShape::kBytes;
    auto kernel = paged_prefill_wgmma_kernel<T, decltype(plain_c)::value>;
    static const cudaError_t configured =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (configured != cudaSuccess) return;  // reported by the caller's launch check
    kernel<<<grid, WgmmaPrefillShape::kThreads, kBytes, stream>>>(prm);
  };
  if (prm.p.variant.soft_cap == 0.0f && prm.p.variant.alibi_slopes == nullptr) launch(std::true_type{});
  else launch(std::false_type{});
}

}  // namespace pagedattn::cuda
