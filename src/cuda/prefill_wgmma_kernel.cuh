// Internal (CUDA, sm_90a): paged prefill / append on Hopper's warpgroup MMA (wgmma).
//
// A CTA takes 128 packed query rows of one sequence and one KV head (row i: query token
// i / group, head i % group, as in the mma.sync kernel) and is three warpgroups:
// - a producer fills a three-stage ring of 128-key K and V tiles (two stages of 64 keys at
//   head_dim 256; 128-byte swizzled, as wgmma reads them): a tile of whole valid pages by TMA,
//   one box per page (16-token pages, stored by 8-slot groups: page_tensor_map.h) or per page
//   and 64 dims, issued by the lanes of one
//   warp (the page table is arbitrary, so a tile is as many boxes as pages);
//   a tile at either end of the key range by a cp.async gather that zero-fills the keys outside
//   it. The stage's "full_k" and "full_v" barriers complete when the bytes land;
// - two consumers of 64 rows each compute S = Q K^T with wgmma (Q and K from shared memory),
//   the online softmax on the accumulators, and O += P V with wgmma (P from registers, V from
//   shared memory read MN-major), then release the stage on its "empty" barrier.
// Inside a consumer, tile j's S and softmax overlap tile j-1's P V; the two consumers issue
// their matrix work independently (strict turns, FA3's "pingpong", measured 1-2% slower).
// Register budgets are moved from the producer to the consumers with setmaxnreg.
// Head dims: kD = 128, 64 (S's k-steps and P V's columns halved) for head dims up to 64, or 256
// (64-key tiles in two stages, P V as two n128 wgmma per k-step) past 128; a head_dim below kD
// (a multiple of 8) runs zero-padded: Q's, and the gathered K and V rows'
// dims past it are zeros, as are a TMA box's (its tensor map ends at head_dim); those output
// dims are not written.
// Design log and measurements: docs/perf-notes.md (CUDA prefill, v5 onwards).
#pragma once

#include "cuda/decode_kernel.cuh"
#include "cuda/mma_fragments.cuh"
#include "cuda/prefill_params.cuh"
#include "cuda/prefill_wgmma_launch.h"
#include "cuda/wgmma.cuh"

namespace pagedattn::cuda {

// op over get(kLo) .. get(kLo + kN - 1) as a balanced tree (log2 kN dependent steps; the
// compiler keeps a loop's order, which for floating point is one long chain).
template <int kLo, int kN, class Get, class Op>
__device__ __forceinline__ float tree_reduce(const Get& get, const Op& op) {
  if constexpr (kN == 1) return get(kLo);
  else return op(tree_reduce<kLo, kN / 2>(get, op), tree_reduce<kLo + kN / 2, kN / 2>(get, op));
}

// fp8 caches: one consumer's q chunks (kLoads 16-byte chunks of bf16 or f16 per thread, 64 rows
// per warpgroup), rewritten in place as f16 divided by the power of two that keeps the
// warpgroup's largest |q| below 2^15 (f16_range_shift, as the mma.sync kernel does per warp);
// returns that power.
// s_max: the warpgroup's maximum in shared memory (zero at the start), `barrier` its named barrier.
template <int kLoads>
__device__ __forceinline__ float q_into_f16_range(uint4 (&qv)[kLoads], bool bf16, unsigned* s_max, int barrier) {
  auto value = [bf16](std::uint32_t w, int h) {
    if (bf16) return __uint_as_float(h ? (w & 0xffff0000u) : (w << 16));
    return __half2float(__ushort_as_half(static_cast<unsigned short>(h ? w >> 16 : w & 0xffffu)));
  };
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const std::uint32_t w[4] = {qv[k].x, qv[k].y, qv[k].z, qv[k].w};
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(value(w[i / 2], i % 2)));
  }
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if ((threadIdx.x & 31) == 0) atomicMax(s_max, __float_as_uint(amax));  // non-negative floats order as their bits
  sm90::named_barrier(barrier, 128);
  const int shift = f16_range_shift(__uint_as_float(*s_max));
  const float down = ldexpf(1.0f, -shift);
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    std::uint32_t w[4] = {qv[k].x, qv[k].y, qv[k].z, qv[k].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = pack2<__half>(value(w[i], 0) * down, value(w[i], 1) * down);
    qv[k] = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return ldexpf(1.0f, shift);
}

// T: bf16 or f16 (q and cache); kD: 64, 128 or 256; kPlain: no soft-cap and no ALiBi; kPageMajor
// (kD 128 only): the ring's tiles are stored page by page (16-key pages, see
// WgmmaPrefillShape), else as 64-dim halves of 128 keys. kVT: V's tiles transposed (vLLM's
// split layout, whose V pages hold each dim's slots in a run): a tile is kD rows of keys, 64
// keys per 128-byte swizzled row block, gathered by cp.async as runs of 8 slots per dim (pages
// of a multiple of 8 slots), and P V reads it K-major; K (16-byte chunks of 8 dims, strided
// by page slots) takes the row gather as NHD does. Grid as the mma.sync kernel: (packed row
// tile, KV head + num_kv_heads * split, sequence).
//
// KV: T, or fp8 (T = __half): K and V rows land raw in kRawStages stages ahead (a page per TMA
// box, or gathered), and the producer's threads widen them into the f16 ring (exact); q is scaled
// into f16's range by a power of two per consumer, the K and V scales fold into the logit scale
// and the output. K's stage is released as soon as S is done (its own empty barrier), so that
// the producer widens tile j + 1's K while tile j's softmax and P V run on a ring of two stages.
template <class T, class KV, int kD, bool kPlain, bool kPageMajor, bool kVT>
__global__ void __launch_bounds__(WgmmaPrefillShape::kThreads, 1)
    paged_prefill_wgmma_kernel(const __grid_constant__ PrefillKernelParams prm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kFp8 = sizeof(KV) == 1;
  using Shape = WgmmaPrefillShapeOf<kD, kFp8>;
  static_assert(!kPageMajor || kD == 128, "page-major tiles hold 128-dim rows");
  static_assert(!kPageMajor || !kVT, "transposed V tiles are gathered");
  static_assert(!kFp8 || (std::is_same_v<T, __half> && !kPageMajor && !kVT), "fp8 rows are gathered and widened to f16");
  constexpr int kRows = Shape::kRows, kKeys = Shape::kKeys, kStages = Shape::kStages, kHalves = Shape::kHalves;
  constexpr int kWarpRows = Shape::kWarpRows, kOBlocks = Shape::kOBlocks, kOCols = Shape::kOCols;
  constexpr int kDimPasses = Shape::kChunks > 16 ? Shape::kChunks / 16 : 1;  // 16 lanes cover 16 chunks of a row per pass
  constexpr float kNegInf = detail::kNegInf;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (sm90::smem_address(smem_raw) & 1023)) & 1023);
  unsigned char* s_q = smem;
  unsigned char* s_k = s_q + Shape::kQBytes;            // [stage]
  unsigned char* s_v = s_k + kStages * Shape::kTileBytes;  // [stage]
  unsigned char* s_raw = s_v + kStages * Shape::kTileBytes;  // fp8: [raw stage][K, V]
  auto* s_rows = reinterpret_cast<uint2*>(s_raw + 2 * Shape::kRawStages * Shape::kRawTileBytes);  // producer: K, V offsets
  auto* full_k = reinterpret_cast<std::uint64_t*>(s_rows + kKeys);
  std::uint64_t* full_v = full_k + kStages;
  std::uint64_t* empty = full_v + kStages;  // V's stage (and K's, without fp8) is free again
  std::uint64_t* empty_k = empty + kStages;  // fp8: K's stage is free again
  std::uint64_t* raw_full = empty_k + kStages;  // fp8: [raw stage] landed
  std::uint64_t* raw_empty = raw_full + Shape::kRawStages;  // fp8: [raw stage] read by every producer thread
  auto* s_qmax = reinterpret_cast<unsigned*>(empty + (kFp8 ? 2 * kStages + 2 * Shape::kRawStages : kStages));  // fp8: [consumer]

  const detail::AttentionProblem& p = prm.p;
  PrefillTile tile;
  if (!prefill_tile(prm, kRows, tile)) return;
  const std::int64_t split = tile.split, q0 = tile.q0, n_q = tile.n_q, row0 = tile.row0, kv_len = tile.kv_len;
  const std::int64_t first_pos = tile.first_pos, t_begin = tile.t_begin, t_end = tile.t_end;
  const int kv_head = tile.kv_head, group = tile.group;
  const detail::SeqPages pages = tile.pages;
  const std::int64_t t_lo = t_begin - t_begin % kKeys;  // tiles start at multiples of kKeys
  const int n_tiles = t_begin < t_end ? static_cast<int>(ceil_div(t_end - t_lo, kKeys)) : 0;

  if (threadIdx.x == 0) {
    for (int st = 0; st < kStages; ++st) {
      sm90::mbarrier_init(&full_k[st], 128);  // every producer thread, once its copies land
      sm90::mbarrier_init(&full_v[st], 128);
      sm90::mbarrier_init(&empty[st], 8);     // every consumer warp
      if constexpr (kFp8) sm90::mbarrier_init(&empty_k[st], 8);
    }
    if constexpr (kFp8) {
      for (int rs = 0; rs < Shape::kRawStages; ++rs) {
        sm90::mbarrier_init(&raw_full[rs], 128);
        sm90::mbarrier_init(&raw_empty[rs], 128);
      }
      s_qmax[0] = s_qmax[1] = 0u;
    }
    sm90::fence_mbarrier_init();
  }
  __syncthreads();
  // Through a shuffle, so that the compiler sees a warp-uniform value: wgmma in branches it
  // cannot prove uniform are serialised.
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  const int wt = threadIdx.x % 128;
  const int warp = wt / 32, lane = threadIdx.x & 31;

  if (warpgroup == 0) {
    // ---- producer: K and V tiles into the ring --------------------------------------------
    sm90::shrink_registers<Shape::kProducerRegs>();
    const detail::KVTensorAccess& ka = p.kv.k;
    const detail::KVTensorAccess& va = p.kv.v;
    const int chunk = lane & 15;  // the 16-byte chunk of a row this thread copies
    // Dims past head_dim are zeros: which of this thread's chunks (one per dim pass) are real.
    bool chunk_live[kDimPasses];
#pragma unroll
    for (int dp = 0; dp < kDimPasses; ++dp) chunk_live[dp] = (chunk + 16 * dp) * 8 < p.head_dim;
    const T* k_base = reinterpret_cast<const T*>(ka.data) + ka.offset(0, kv_head, 0, chunk * 8);
    const T* v_base = reinterpret_cast<const T*>(va.data) + va.offset(0, kv_head, 0, chunk * 8);
    // A row's dims 128.. (kD 256): 128 elements on, or 16 chunks of vLLM's split K on (kVT: the
    // row gather copies only K).
    const std::int64_t k_pass = kVT ? 16 * ka.chunk_stride : 128;
    // The host checked that page and token strides fit 31 bits and that every row's offset in
    // units of 8 elements fits 32 bits.
    const auto k_page_stride = static_cast<std::int32_t>(ka.page_stride), v_page_stride = static_cast<std::int32_t>(va.page_stride);
    const auto k_token_stride = static_cast<std::int32_t>(ka.token_stride), v_token_stride = static_cast<std::int32_t>(va.token_stride);
    const auto P = static_cast<std::uint32_t>(p.kv.page_size);
    constexpr std::uint32_t kOutside = 0xffffffffu;
    // Each warp copies kWarpRows rows of a tile: lane l finds row kWarpRows * warp + l's K and V offsets in
    // units of 8 elements (a tile ahead, so the page-table load is in flight while the warp waits and
    // copies), then the warp copies two rows (16 lanes x 16 bytes each) per pass. The offsets
    // are stored odd rows after even ones, so that a thread's rows of two passes (2 pass + hi,
    // 2 pass + 2 + hi) are one 16-byte shared load: the gather's shared loads and copies share
    // the MIO queue with the consumers, which kept page-size-1 tiles waiting (perf-notes, v14).
    uint2* my_rows = s_rows + warp * kWarpRows;
    auto find_row = [&](int j) {
      const std::int64_t t = t_lo + static_cast<std::int64_t>(j) * kKeys + warp * kWarpRows + lane;
      if (j >= n_tiles || (kWarpRows < 32 && lane >= kWarpRows) || t < t_begin || t >= t_end) return make_uint2(kOutside, kOutside);
      const auto key = static_cast<std::uint32_t>(t);
      const std::uint32_t page_idx = prm.page_div.div(key);
      const std::int64_t page = pages.page(page_idx);
      const auto slot = static_cast<std::int32_t>(key - page_idx * P);
      const std::int64_t k_off = page * k_page_stride + static_cast<std::int64_t>(slot) * k_token_stride;
      const std::int64_t v_off = page * v_page_stride + static_cast<std::int64_t>(slot) * v_token_stride;
      return make_uint2(static_cast<std::uint32_t>(k_off >> 3), static_cast<std::uint32_t>(v_off >> 3));
    };
    // Tiles wholly inside [t_begin, t_end) are whole pages of valid keys (kKeys is a multiple
    // of the page size when the host made the maps) and may come as TMA boxes; tiles at the
    // ends of the key range take the cp.async gather, which fills the keys outside the range
    // with zeros (a page's unused slots may hold NaN).
    const int pages_per_tile = kKeys / static_cast<int>(P);
    auto by_tma = [&](int j) {
      const std::int64_t ts = t_lo + static_cast<std::int64_t>(j) * kKeys;
      return prm.tma_pages && ts >= t_begin && ts + kKeys <= t_end;
    };
    // A tile's rows, looked up a tile ahead (none for a TMA tile).
    auto find_rows = [&](int j) { return by_tma(j) ? make_uint2(kOutside, kOutside) : find_row(j); };
    // Warp 0's lane i issues box i of a TMA tile, its page id looked up a tile ahead: boxes of
    // whole pages (page-major tiles, fp8's raw rows) or of 64 dims (kHalves per page).
    constexpr int kBoxesPerPage = kPageMajor || kFp8 ? 1 : kHalves;
    const int boxes = kBoxesPerPage * pages_per_tile;
    auto find_page = [&](int j) {
      if (warp != 0 || lane >= boxes || j >= n_tiles || !by_tma(j)) return 0;
      const std::int64_t ts = t_lo + static_cast<std::int64_t>(j) * kKeys;
      return static_cast<int>(pages.page(prm.page_div.div(static_cast<std::uint32_t>(ts)) + lane / kBoxesPerPage));
    };
    const int c_head1 = prm.tma_head_inner ? kv_head : 0, c_head2 = prm.tma_head_inner ? 0 : kv_head;
    if constexpr (kFp8) {
      // fp8: kRowLanes lanes per row (16-byte chunks of kD one-byte elements), kPassRows rows
      // per pass. A tile's K and V rows land raw in a raw stage, kRawStages tiles ahead: as one
      // TMA box per page and tensor (rows of kD bytes, the dims past head_dim zeros), issued by
      // warp 0's lanes, or gathered by cp.async (zeros outside the keys), each thread its own
      // chunks. Each thread then widens the chunks of its rows and arrives on the stage's
      // raw_empty. raw_full counts 128 arrivals: a gathered tile's from every thread as it
      // issues its copies (which it then waits for itself), a TMA tile's from thread 0 with the
      // expected bytes, once warp 0 has seen raw_empty complete (every thread done reading the
      // stage); so no thread's arrival can complete a phase that another has not yet waited for.
      constexpr int kRowLanes = kD / 16, kPassRows = 32 / kRowLanes, kPasses = kWarpRows / kPassRows;
      constexpr int kRaw = Shape::kRawStages, kRawTile = Shape::kRawTileBytes;
      // Lanes in groups of four take the 64 bytes of one row's 64-dim block. The two groups of a
      // quarter-warp take rows of different parity and blocks of different parity, so their raw
      // loads fall in different bank halves and their swizzled stores on eight distinct slots
      // (the slot of chunk c of row r is (c % 8) ^ (r % 8)).
      const int lane_group = lane >> 2, quarter = lane_group >> 1, odd = lane_group & 1;
      const int rp = kD == 64 ? lane_group : kD == 128 ? (quarter + odd) & 3 : (quarter & 1) ^ odd;
      const int block = kD == 64 ? 0 : kD == 128 ? odd : 2 * (quarter >> 1) + odd;
      const int c8 = 4 * block + (lane & 3);
      const bool live8 = c8 * 16 < p.head_dim;
      const KV* k8 = reinterpret_cast<const KV*>(ka.data) + ka.offset(0, kv_head, 0, c8 * 16);
      const KV* v8 = reinterpret_cast<const KV*>(va.data) + va.offset(0, kv_head, 0, c8 * 16);
      const int my_row0 = warp * kWarpRows + rp;  // + kPassRows * pass
      unsigned char* raw0 = s_raw + my_row0 * kD + c8 * 16;
      auto issue_raw = [&](int j, uint2 rows, int page) {
        const int rs = j % kRaw;
        if (j < n_tiles && by_tma(j)) {
          if (warp == 0) {
            if (j >= kRaw) sm90::mbarrier_wait(&raw_empty[rs], ((j / kRaw) + 1) & 1);  // tile j - kRaw read
            if (lane == 0) {
              sm90::mbarrier_arrive_expect_tx(&raw_full[rs], 2 * kRawTile);
              sm90::mbarrier_arrive(&raw_full[rs], 127);
            }
            __syncwarp();  // lane 0's expect_tx comes before any box lands
            if (lane < boxes) {
              const std::uint32_t dst = sm90::smem_address(s_raw + rs * 2 * kRawTile + lane * static_cast<int>(P) * kD);
              sm90::tma_load_4d(dst, &prm.k_pages, 0, c_head1, c_head2, page, &raw_full[rs]);
              sm90::tma_load_4d(dst + kRawTile, &prm.v_pages, 0, c_head1, c_head2, page, &raw_full[rs]);
            }
          }
        } else if (j < n_tiles) {
          __syncwarp();  // the warp's reads of the previous tile's offsets are done
          if (lane < kWarpRows) my_rows[lane] = rows;
          __syncwarp();
          unsigned char* raw = raw0 + rs * 2 * kRawTile;
#pragma unroll
          for (int pass = 0; pass < kPasses; ++pass) {
            const uint2 off = my_rows[kPassRows * pass + rp];
            const bool valid = off.x != kOutside && live8;
            const std::uint64_t k_at = valid ? static_cast<std::uint64_t>(off.x) * 8 : 0, v_at = valid ? static_cast<std::uint64_t>(off.y) * 8 : 0;
            const std::uint32_t dst = sm90::smem_address(raw + pass * kPassRows * kD);
            sm90::cp_async_16_or_zeros(dst, k8 + k_at, valid);
            sm90::cp_async_16_or_zeros(dst + kRawTile, v8 + v_at, valid);
          }
          sm90::mbarrier_arrive(&raw_full[rs]);
        }
        cp_async_commit();  // empty past the last tile and for TMA tiles: the wait below counts groups
      };
      // Chunks 2 c8 and 2 c8 + 1 of row r in the swizzled f16 tile: they share the 64-dim block
      // c8 / 4 and differ in bit 4 of the offset.
      auto widen = [&](const unsigned char* raw, unsigned char* tile, std::uint64_t* full) {
#pragma unroll 2
        for (int pass = 0; pass < kPasses; ++pass) {
          uint4 lo, hi;
          widen_fp8x16_to_f16<KV>(*reinterpret_cast<const uint4*>(raw + pass * kPassRows * kD), lo, hi);
          const int r = my_row0 + pass * kPassRows;
          const int off = block * kKeys * 128 + r * 128 + (((2 * c8) & 7) ^ (r & 7)) * 16;
          *reinterpret_cast<uint4*>(tile + off) = lo;
          *reinterpret_cast<uint4*>(tile + (off ^ 16)) = hi;
        }
        sm90::fence_shared_for_async();  // the consumers' wgmma read these stores
        sm90::mbarrier_arrive(full);
      };
      uint2 next_rows = find_rows(0);
      int next_page = find_page(0);
#pragma unroll
      for (int j = 0; j < kRaw; ++j) {
        issue_raw(j, next_rows, next_page);
        next_rows = find_rows(j + 1);
        next_page = find_page(j + 1);
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int stage = j % kStages;
        const unsigned char* raw = raw0 + (j % kRaw) * 2 * kRawTile;
        cp_async_wait<kRaw - 1>();  // this thread's copies of tile j have landed (a gathered tile)
        sm90::mbarrier_wait(&raw_full[j % kRaw], (j / kRaw) & 1);  // and the boxes (a TMA tile)
        if (j >= kStages) sm90::mbarrier_wait(&empty_k[stage], ((j / kStages) + 1) & 1);
        widen(raw, s_k + stage * Shape::kTileBytes, &full_k[stage]);
        if (j >= kStages) sm90::mbarrier_wait(&empty[stage], ((j / kStages) + 1) & 1);
        widen(raw + kRawTile, s_v + stage * Shape::kTileBytes, &full_v[stage]);
        sm90::mbarrier_arrive(&raw_empty[j % kRaw]);  // done with the raw stage (a TMA tile may land there)
        issue_raw(j + kRaw, next_rows, next_page);
        next_rows = find_rows(j + kRaw + 1);
        next_page = find_page(j + kRaw + 1);
      }
      cp_async_wait<0>();
      return;
    }
    // This thread's destinations: row kWarpRows * warp + 2 * pass + hi, chunk `chunk` (+ 16 per
    // dim pass); the swizzle term depends on the pass only through pass % 4.
    const int hi = lane >> 4;
    const std::uint32_t dst_base = kPageMajor ? warp * 2 * Shape::kPageMajorBytes + (chunk >> 3) * Shape::kGroupHalfBytes + hi * 128
                                              : (chunk >> 3) * kKeys * 128 + (warp * kWarpRows + hi) * 128;
    // Rows 2 * pass and 2 * pass + 1 of the warp's kWarpRows: in the page-major tile, pages of 16
    // rows in two groups of 8.
    auto pass_offset = [](int pass) {
      return kPageMajor ? (pass / 8) * Shape::kPageMajorBytes + (pass % 8 / 4) * Shape::kSlotGroupBytes + (pass % 4) * 256
                        : pass * 256;
    };
    std::uint32_t swizzle[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) swizzle[q] = ((chunk & 7) ^ ((2 * q + hi) & 7)) << 4;
    const uint4* my_pass_pairs = reinterpret_cast<const uint4*>(my_rows + hi * (kWarpRows / 2));
    auto copy_tile = [&](std::uint32_t tile, const T* base, auto is_v) {
      if (chunk >= Shape::kChunks) return;  // kD 64: half of the lanes
#pragma unroll
      for (int pair = 0; pair < kWarpRows / 4; ++pair) {
        const uint4 rows = my_pass_pairs[pair];  // passes 2 pair and 2 pair + 1
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const int pass = 2 * pair + odd;
          const std::uint32_t off = decltype(is_v)::value ? (odd ? rows.w : rows.y) : (odd ? rows.z : rows.x);
#pragma unroll
          for (int dp = 0; dp < kDimPasses; ++dp) {  // chunks 16 dp + chunk: 64-dim blocks 2 dp + chunk / 8
            // Outside the keys: zeros (masked, never NaN).
            sm90::cp_async_16_or_zeros(tile + dst_base + dp * 2 * kKeys * 128 + pass_offset(pass) + swizzle[pass & 3],
                                       base + static_cast<std::uint64_t>(off == kOutside ? 0 : off) * 8 + dp * k_pass,
                                       off != kOutside && chunk_live[dp]);
          }
        }
      }
    };
    // kVT: V's tile as kD rows (dims) of kKeys keys, 64 keys per 128-byte row block. Thread wt
    // copies one 8-key group (vg) of dims vd0, vd0 + kVtDimStep, ...: a run of 8 slots of one
    // page per dim (pages hold whole groups), its page looked up a tile ahead. A group that
    // starts before t_begin is copied whole (the keys before the range are the sequence's own,
    // finite, and masked); one that ends past t_end copies only its keys before t_end (the
    // rest of the 16 bytes zero-filled: a page's unused slots may hold NaN).
    constexpr int kVtGroups = kKeys / 8, kVtDimStep = 128 / kVtGroups;
    const int vg = wt % kVtGroups, vd0 = wt / kVtGroups;
    const T* vt_base = reinterpret_cast<const T*>(va.data) + va.offset(0, kv_head, 0, 0);
    const std::int64_t vt_dim_stride = va.elem_stride;
    const std::uint32_t vt_dst = (vg / 8) * kD * 128 + vd0 * 128 + (((vg % 8) ^ (vd0 % 8)) << 4);
    struct VtGroup {
      std::uint32_t off;  // the group's first slot, in 16-byte units from vt_base
      int bytes;          // of its 16 bytes per dim, those copied
    };
    auto find_vgroup = [&](int j) {
      const std::int64_t t = t_lo + static_cast<std::int64_t>(j) * kKeys + 8 * vg;
      if (j >= n_tiles || t + 8 <= t_begin || t >= t_end) return VtGroup{0, 0};
      const auto key = static_cast<std::uint32_t>(t);
      const std::uint32_t page_idx = prm.page_div.div(key);
      const std::int64_t page = pages.page(page_idx);
      const std::int64_t off = page * v_page_stride + (key - page_idx * P);
      return VtGroup{static_cast<std::uint32_t>(off >> 3), static_cast<int>(2 * min(std::int64_t{8}, t_end - t))};
    };
    auto copy_vt_tile = [&](std::uint32_t tile, VtGroup g) {
      const T* src = vt_base + static_cast<std::uint64_t>(g.off) * 8;
#pragma unroll
      for (int i = 0; i < kD / kVtDimStep; ++i) {
        const int d = vd0 + kVtDimStep * i;
        cp_async_16_prefix(tile + vt_dst + i * kVtDimStep * 128, src + d * vt_dim_stride, d < p.head_dim ? g.bytes : 0);
      }
    };
    // A TMA tile: warp 0 copies each page of K and V as kHalves TMA boxes (64 dims x page_size
    // slots), thread 0 expects their bytes on the full barriers, the other threads only arrive.
    // Lane i's box: page i, both halves, in a page-major tile; else page i / kHalves, dims
    // 64 * (i % kHalves).
    const std::uint32_t box_offset =
        kPageMajor ? lane * Shape::kPageMajorBytes : (lane % kHalves) * kKeys * 128 + (lane / kHalves) * P * 128;
    auto load_pages = [&](std::uint32_t tile, const CUtensorMap* map, std::uint64_t* full, int page) {
      if (lane >= boxes) return;
      if constexpr (kPageMajor) {
        sm90::tma_load_5d(tile + box_offset, map, 0, 0, 0, prm.page_mul_g * page, prm.page_mul_h * page + kv_head, full);
      }
      else sm90::tma_load_4d(tile + box_offset, map, 64 * (lane % kHalves), c_head1, c_head2, page, full);
    };
    uint2 next = find_rows(0);
    int next_pages = find_page(0);
    VtGroup next_vg{0, 0};
    if constexpr (kVT) next_vg = find_vgroup(0);
    for (int j = 0; j < n_tiles; ++j) {
      const int stage = j % kStages;
      if (j >= kStages) sm90::mbarrier_wait(&empty[stage], ((j / kStages) + 1) & 1);
      const std::uint32_t k_tile = sm90::smem_address(s_k + stage * Shape::kTileBytes);
      const std::uint32_t v_tile = sm90::smem_address(s_v + stage * Shape::kTileBytes);
      if (by_tma(j)) {
        // The full barriers count 128 arrivals (a gathered tile's copies arrive per thread);
        // here thread 0 makes them all, in two operations per barrier instead of 128 threads'
        // arrivals in the MIO queue the consumers share.
        if (wt == 0) {
          sm90::mbarrier_arrive_expect_tx(&full_k[stage], Shape::kTileBytes);
          sm90::mbarrier_arrive(&full_k[stage], 127);
          sm90::mbarrier_arrive_expect_tx(&full_v[stage], Shape::kTileBytes);
          sm90::mbarrier_arrive(&full_v[stage], 127);
        }
        if (warp == 0) {
          __syncwarp();  // lane 0's expect_tx comes before any box lands
          load_pages(k_tile, &prm.k_pages, &full_k[stage], next_pages);
          load_pages(v_tile, &prm.v_pages, &full_v[stage], next_pages);
        }
      } else {
        __syncwarp();  // the warp's reads of the previous tile's rows are done
        if (kWarpRows == 32 || lane < kWarpRows) my_rows[(lane & 1) * (kWarpRows / 2) + (lane >> 1)] = next;
        __syncwarp();
        copy_tile(k_tile, k_base, std::false_type{});
        sm90::mbarrier_arrive_on_copies(&full_k[stage]);
        if constexpr (kVT) copy_vt_tile(v_tile, next_vg);
        else copy_tile(v_tile, v_base, std::true_type{});
        sm90::mbarrier_arrive_on_copies(&full_v[stage]);
      }
      next = find_rows(j + 1);
      next_pages = find_page(j + 1);
      if constexpr (kVT) next_vg = find_vgroup(j + 1);
    }
    return;  // the consumers wait for the copies on the full barriers
  }

  // ---- consumers: 64 rows each ---------------------------------------------------------------
  sm90::grow_registers<Shape::kConsumerRegs>();
  const int consumer = warpgroup - 1;
  const std::int64_t wg_row0 = row0 + 64 * consumer;
  auto query_token = [&](std::int64_t i) -> std::int64_t { return prm.q_index ? prm.q_index[q0 + i] : q0 + i; };
  // Q rows into shared memory (kChunks threads per row of kD dims; dead rows zero). All loads are in
  // flight before the first store: one after another they cost a memory latency each.
  constexpr int kQLoads = 64 * Shape::kChunks / 128;
  uint4 qv[kQLoads];
  float q_mul = 1.0f;  // fp8: the power of two q was divided by
#pragma unroll
  for (int k = 0; k < kQLoads; ++k) {
    const int i = wt + 128 * k, r = i / Shape::kChunks, c = i % Shape::kChunks;
    const std::int64_t packed = wg_row0 + r, tok = packed / group;
    qv[k] = make_uint4(0, 0, 0, 0);
    if (tok < n_q && c * 8 < p.head_dim) {
      const std::int64_t head = kv_head * group + packed % group;
      qv[k] = *reinterpret_cast<const uint4*>(reinterpret_cast<const T*>(p.qo.q) + query_token(tok) * p.qo.q_token_stride +
                                              head * p.qo.q_head_stride + c * 8);
    }
  }
  if constexpr (kFp8) q_mul = q_into_f16_range<kQLoads>(qv, p.qo.q_dtype == DType::kBF16, s_qmax + consumer, 1 + consumer);
#pragma unroll
  for (int k = 0; k < kQLoads; ++k) {
    const int i = wt + 128 * k;
    *reinterpret_cast<uint4*>(s_q + sm90::swizzled_offset(64 * consumer + i / Shape::kChunks, i % Shape::kChunks, kRows)) = qv[k];
  }
  sm90::fence_shared_for_async();
  sm90::named_barrier(1 + consumer, 128);

  const int gid = lane >> 2, tig = lane & 3;
  // This thread's rows: gid and gid + 8 of its warp's 16 (found again for the epilogue, so that
  // the loop does not keep them).
  struct Row {
    int tok, head;
    bool live;
  };
  auto row_of = [&](int r) {
    const std::int64_t packed = wg_row0 + warp * 16 + gid + 8 * r;
    const int tk = static_cast<int>(packed / group);
    return Row{tk, kv_head * group + static_cast<int>(packed % group), tk < n_q};
  };
  int pos[2];
  bool live[2];
  float slope[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const Row row = row_of(r);
    live[r] = row.live;
    pos[r] = static_cast<int>(first_pos + row.tok);
    slope[r] = (live[r] && p.variant.alibi_slopes) ? p.variant.alibi_slopes[row.head] : 0.0f;
  }
  // The keys row r sees, [key_lo, key_hi) (empty for a dead row): a masked tile then takes one
  // or two compares per logit against these, shifted to the thread's first key of the tile, and the
  // row's position, liveness and the range's ends need no registers in the loop.
  int key_lo[2], key_hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const std::int64_t lo = p.variant.window_left >= 0 ? max(t_begin, static_cast<std::int64_t>(pos[r]) - p.variant.window_left) : t_begin;
    const std::int64_t hi = p.variant.causal ? min(t_end, static_cast<std::int64_t>(pos[r]) + 1) : t_end;
    // A dead row's range is empty at t_begin, so that masking only the ends of the live rows'
    // ranges (kMaskHi below) hides all of it too.
    key_lo[r] = live[r] ? static_cast<int>(lo) : static_cast<int>(t_begin);
    key_hi[r] = live[r] ? static_cast<int>(max(lo, hi)) : key_lo[r];
  }
  // Tiles inside [open_lo, open_hi) are seen whole by every live row of the warpgroup and need
  // no mask.
  const std::int64_t wg_first = wg_row0 / group, wg_last = min(n_q - 1, (wg_row0 + 63) / group);
  auto hi_of = [&](std::int64_t tk) { return p.variant.causal ? min(kv_len, first_pos + tk + 1) : kv_len; };
  auto lo_of = [&](std::int64_t tk) { return p.variant.window_left >= 0 ? first_pos + tk - p.variant.window_left : std::int64_t{0}; };
  const int open_hi = static_cast<int>(min(hi_of(wg_first), t_end)), open_lo = static_cast<int>(max(lo_of(wg_last), t_begin));
  const int t_lo32 = static_cast<int>(t_lo);

  const float s_mul = p.variant.scale * (kPlain ? kLog2e : 1.0f) * (kFp8 ? p.kv.k_scale_of(kv_head) * q_mul : 1.0f);
  const float soft_cap = p.variant.soft_cap;
  const std::uint32_t q_addr = sm90::smem_address(s_q) + 64 * consumer * 128;
  const std::uint32_t k_addr = sm90::smem_address(s_k), v_addr = sm90::smem_address(s_v);
  // K-major Q and K: k-step kk is 16 elements of column block kk / 4; V (MN-major): 16 keys.
  // Built once: a stage or a step only adds a constant to the start address (no per-wgmma
  // address arithmetic in the issue). In a page-major tile the 8-key groups lie a slot group
  // apart and a group's dim halves a group half apart; V's 16-key step is one page.
  constexpr std::uint32_t kHalfBytes = kPageMajor ? Shape::kGroupHalfBytes : kKeys * 128;  // a 64-dim half of the keys
  constexpr std::uint32_t kGroupBytes = kPageMajor ? Shape::kSlotGroupBytes : 1024;        // between 8-key groups
  const std::uint64_t q_desc0 = sm90::swizzled_descriptor(q_addr, 16);
  const std::uint64_t k_desc0 = sm90::swizzled_descriptor(k_addr, 16, kGroupBytes);
  const std::uint64_t vt_desc0 = sm90::swizzled_descriptor(v_addr, 16);  // kVT: V K-major, 8 dim rows per 1024 bytes
  // V's descriptors as K's of the same stage plus a constant (V's region lies a fixed distance
  // after K's): ptxas otherwise rebuilds V's from its address in every tile.
  const std::uint64_t kv_delta = sm90::swizzled_descriptor(v_addr - k_addr, kHalfBytes, kGroupBytes) -
                                 sm90::swizzled_descriptor(0, 16, kGroupBytes);
  auto kd_step = [](int kk, std::uint32_t half_bytes) { return static_cast<std::uint32_t>((kk >> 2) * half_bytes + (kk & 3) * 32); };
  auto q_desc = [&](int kk) { return sm90::advanced(q_desc0, kd_step(kk, kRows * 128)); };
  auto k_desc = [&](std::uint64_t stage_desc, int kk) { return sm90::advanced(stage_desc, kd_step(kk, kHalfBytes)); };
  auto v_desc = [&](std::uint64_t stage_desc, int ks) {
    return sm90::advanced(stage_desc, ks * (kPageMajor ? Shape::kPageMajorBytes : 16 * 128));
  };
  auto stage_desc = [&](std::uint64_t desc0, int j) {
    return sm90::advanced(desc0, static_cast<std::uint32_t>(j % kStages) * Shape::kTileBytes);
  };

  float o[kOBlocks][kOCols / 2];  // O's 64 x kD accumulators, kOCols columns per block
#pragma unroll
  for (int b = 0; b < kOBlocks; ++b)
#pragma unroll
    for (int i = 0; i < kOCols / 2; ++i) o[b][i] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  auto wait_k = [&](int j) { sm90::mbarrier_wait(&full_k[j % kStages], (j / kStages) & 1); };
  auto wait_v = [&](int j) { sm90::mbarrier_wait(&full_v[j % kStages], (j / kStages) & 1); };
  auto release = [&](int j) {
    __syncwarp();
    if (lane == 0) sm90::mbarrier_arrive(&empty[j % kStages]);
  };
  auto release_k = [&](int j) {  // fp8: S of tile j is done with K's stage
    if constexpr (kFp8) {
      __syncwarp();
      if (lane == 0) sm90::mbarrier_arrive(&empty_k[j % kStages]);
    }
  };

  float sc[kKeys / 2];               // S of the current tile, then its P in f32
  std::uint32_t pa[kKeys / 16][4];  // P of the previous tile as A fragments of 16-key steps
  auto issue_s = [&](int j) {
    const std::uint64_t kd = stage_desc(k_desc0, j);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) sm90::wgmma_ss<T>(sc, q_desc(kk), k_desc(kd, kk), kk > 0);
    sm90::wgmma_commit();
  };
  auto issue_pv = [&](int j) {
    const std::uint64_t vd = stage_desc(k_desc0, j) + kv_delta;
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
#pragma unroll
      for (int b = 0; b < kOBlocks; ++b) {  // dims 128 b ..: two 64-dim blocks further
        if constexpr (kVT) {  // K-major: keys 16 ks.. of 64-key block ks / 4, dim rows kOCols b..
          const std::uint64_t desc = sm90::advanced(stage_desc(vt_desc0, j), kd_step(ks, kD * 128) + b * kOCols * 128);
          sm90::wgmma_rs<T, true>(o[b], pa[ks], desc);
        } else {
          const std::uint64_t desc = v_desc(vd, ks);
          sm90::wgmma_rs<T>(o[b], pa[ks], b == 0 ? desc : sm90::advanced(desc, b * 2 * kHalfBytes));
        }
      }
    }
    sm90::wgmma_commit();
  };
  auto pv_done = [&] {
#pragma unroll
    for (int b = 0; b < kOBlocks; ++b) sm90::fence_registers(o[b]);
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) sm90::fence_registers(pa[ks]);
  };
  // The online softmax of tile j's logits in sc, without branches (it runs while the previous
  // tile's P V is in flight, and the compiler serialises wgmma around divergent code). Sets the
  // factors the rows' outputs take, and `rescale` when any of them is not 1.
  //
  // A row's running maximum moves only when a tile's maximum exceeds it by more than
  // kMaxDrift (base 2): the exponentials may then reach 2^kMaxDrift, well inside f32 and the
  // 16-bit P, and most tiles after the first few need no rescale of O (kD / 2 multiplies per
  // thread). The decision is per warp (its rows' O lives in its own registers).
  constexpr float kMaxDrift = 8.0f;
  constexpr int kOpen = 0, kMaskHi = 1, kMaskBoth = 2;
  // masked_c: kOpen, kMaskHi (only keys past a row's end are hidden: the diagonal tile of
  // causal prefill) or kMaskBoth.
  auto softmax = [&](int j, auto masked_c, float (&corr)[2], bool& rescale) {
    constexpr int kMask = decltype(masked_c)::value;
    const int ts = t_lo32 + j * kKeys;  // the tile's first key; positions fit 31 bits
    float rmax[2];
    int lo[2], hi[2];  // row r's keys relative to this thread's first key of the tile
#pragma unroll
    for (int r = 0; r < 2; ++r) lo[r] = key_lo[r] - ts - 2 * tig, hi[r] = key_hi[r] - ts - 2 * tig;
    // Accumulator i * 4 + e: row gid + 8 * (e / 2), key ts + 8 * i + 2 * tig + e % 2.
#pragma unroll
    for (int i = 0; i < kKeys / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        // Plain logits stay unscaled here: the scale folds into the exponent's FFMA below.
        float x = sc[4 * i + e];
        if constexpr (!kPlain) {
          const int t = ts + 8 * i + 2 * tig + (e & 1);
          x *= s_mul;
          x = soft_cap > 0.0f ? soft_cap * tanhf(x / soft_cap) : x;
          x = (x + slope[r] * static_cast<float>(t - pos[r])) * kLog2e;
        }
        if constexpr (kMask == kMaskBoth) {
          const int c = 8 * i + (e & 1);
          x = c >= lo[r] && c < hi[r] ? x : kNegInf;
        } else if constexpr (kMask == kMaskHi) {
          x = 8 * i + (e & 1) < hi[r] ? x : kNegInf;
        }
        sc[4 * i + e] = x;
      }
    }
    // Row maxima and (below) row sums as trees: log2(kKeys / 4) dependent steps. Row r's
    // values are accumulators 4 i + 2 r and 4 i + 2 r + 1.
    auto row_value = [&](int r) { return [&sc, r](int k) { return sc[4 * (k >> 1) + 2 * r + (k & 1)]; }; };
    auto max2 = [](float a, float b) { return fmaxf(a, b); };
#pragma unroll
    for (int r = 0; r < 2; ++r) rmax[r] = tree_reduce<0, kKeys / 4>(row_value(r), max2);
    const float p_mul = kPlain ? s_mul : 1.0f;  // what still multiplies the stored logits
    float m_sub[2], m_new[2];
    bool drift = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      rmax[r] = fmaxf(rmax[r], __shfl_xor_sync(0xffffffffu, rmax[r], 1));
      rmax[r] = fmaxf(rmax[r], __shfl_xor_sync(0xffffffffu, rmax[r], 2));
      m_new[r] = fmaxf(m[r], rmax[r] * p_mul);  // s_mul > 0 keeps the order
      drift = drift || m_new[r] - m[r] > kMaxDrift;  // also the first key (-inf to finite)
    }
    rescale = __any_sync(0xffffffffu, drift);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      corr[r] = !rescale || m_new[r] == kNegInf ? 1.0f : fast_exp2(m[r] - m_new[r]);
      m[r] = rescale ? m_new[r] : m[r];
      l[r] *= corr[r];
      // A row with no key yet has m = -inf and only -inf logits: 2^(-inf - 0) = 0.
      m_sub[r] = m[r] == kNegInf ? 0.0f : m[r];
    }
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) sc[i] = fast_exp2(fmaf(sc[i], p_mul, -m_sub[(i >> 1) & 1]));
    auto add2 = [](float a, float b) { return a + b; };
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] += tree_reduce<0, kKeys / 4>(row_value(r), add2);
  };
  // O takes the factors; P (sc) becomes the A fragments: n-blocks 2 ks and 2 ks + 1.
  auto rescale_and_pack = [&](const float (&corr)[2], bool rescale) {
    if (rescale) {
#pragma unroll
      for (int b = 0; b < kOBlocks; ++b)
#pragma unroll
        for (int i = 0; i < kOCols / 2; ++i) o[b][i] *= corr[(i >> 1) & 1];
    }
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
      pa[ks][0] = pack2<T>(sc[8 * ks], sc[8 * ks + 1]);
      pa[ks][1] = pack2<T>(sc[8 * ks + 2], sc[8 * ks + 3]);
      pa[ks][2] = pack2<T>(sc[8 * ks + 4], sc[8 * ks + 5]);
      pa[ks][3] = pack2<T>(sc[8 * ks + 6], sc[8 * ks + 7]);
    }
  };
  // Which softmax a tile takes: open when every live row of the warpgroup sees all its keys.
  // The choice goes through a shuffle so that ptxas sees it warp-uniform: behind a branch it
  // cannot prove uniform it builds the wgmma descriptors in vector registers and moves each
  // word to the uniform datapath (~30 more instructions per tile).
  auto with_mask = [&](int j, const auto& f) {
    const int ts = t_lo32 + j * kKeys;
    const int kind = __shfl_sync(0xffffffffu, ts >= open_lo && ts + kKeys <= open_hi ? kOpen : ts >= open_lo ? kMaskHi : kMaskBoth, 0);
    if (kind == kOpen) f(std::integral_constant<int, kOpen>{});
    else if (kind == kMaskHi) f(std::integral_constant<int, kMaskHi>{});
    else f(std::integral_constant<int, kMaskBoth>{});
  };

  // Both warpgroups take every tile of the CTA (a tile one of them does not need is masked
  // whole for it), so every stage sees all eight consumer warps release it.
  const int j_first = 0, j_last = n_tiles - 1;
  // After the first tile, tile j's S = Q K^T and softmax run while tile j - 1's P V is on the
  // tensor cores.
  if (j_first <= j_last) {
    float corr[2];
    bool rescale = false;
    wait_k(j_first);
    issue_s(j_first);
    sm90::wgmma_wait<0>();
    sm90::fence_registers(sc);
    release_k(j_first);
    with_mask(j_first, [&](auto masked_c) { softmax(j_first, masked_c, corr, rescale); });
    rescale_and_pack(corr, rescale);
    for (int j = j_first + 1; j <= j_last; ++j) {
      wait_k(j);
      wait_v(j - 1);
      auto step = [&](auto masked_c) {
        issue_s(j);
        issue_pv(j - 1);
        sm90::wgmma_wait<1>();  // S is done; the previous tile's P V may still run
        sm90::fence_registers(sc);
        release_k(j);
        softmax(j, masked_c, corr, rescale);
        // ptxas schedules the wait below as early as nothing stops it, which put it before the
        // exponentials (after the row maxima), so the softmax waited for P V after all. A second
        // wait on tile j's K barrier (complete: returns at once) ends the basic block, and the
        // wait stays after the softmax (perf-notes, prefill v13: -1% prefill, -2% append with
        // the turns gone). With fp8, K's stage was released above, yet its phase cannot move on
        // before this wait: the producer widens K(j + kStages) only after V(j + kStages - 1),
        // which needs this warp's release of tile j - 1 below.
        wait_k(j);
        sm90::wgmma_wait<0>();  // O and P are free again
        pv_done();
      };
      with_mask(j, step);
      release(j - 1);
      rescale_and_pack(corr, rescale);
    }
    wait_v(j_last);
    issue_pv(j_last);
    sm90::wgmma_wait<0>();
    pv_done();
    release(j_last);
  }

  // Row sums were accumulated per lane: complete them across the quad.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
  const float v_scale = kFp8 ? p.kv.v_scale_of(kv_head) : 1.0f;
  std::byte* out = p.qo.out + split * prm.out_split_stride * out_size;
  float* lse = p.qo.lse ? p.qo.lse + split * prm.lse_split_stride : nullptr;
  const int hd_blocks = static_cast<int>(p.head_dim / 8);  // 8-dim blocks of the output
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const Row row = row_of(r);
    if (!row.live) continue;
    float M = m[r], L = l[r];
    const float scale_o = fold_sink(p, row.head, M, L);
    const float inv = L > 0.0f ? scale_o * v_scale / L : 0.0f;
    const std::int64_t q_tok = query_token(row.tok);
    std::byte* o_row = out + (q_tok * p.qo.out_token_stride + row.head * p.qo.out_head_stride) * out_size;
    // Pairs of a 16-bit output in one 4-byte store where the row allows it.
    auto store_pairs = [&](auto out_c) {
      using Out = decltype(out_c);
#pragma unroll
      for (int i = 0; i < kD / 8; ++i) {  // columns 8 i + 2 tig: block i / (kOCols / 8)
        if (i >= hd_blocks) break;
        const float* ob = o[i / (kOCols / 8)];
        const int c = i % (kOCols / 8);
        *reinterpret_cast<std::uint32_t*>(o_row + (8 * i + 2 * tig) * 2) = pack2<Out>(ob[4 * c + 2 * r] * inv, ob[4 * c + 2 * r + 1] * inv);
      }
    };
    const bool pairs = reinterpret_cast<std::uintptr_t>(o_row) % 4 == 0;
    if (pairs && p.qo.out_dtype == DType::kBF16) {
      store_pairs(__nv_bfloat16{});
    } else if (pairs && p.qo.out_dtype == DType::kF16) {
      store_pairs(__half{});
    } else {
#pragma unroll
      for (int i = 0; i < kD / 8; ++i) {
        if (i >= hd_blocks) break;
        const float* ob = o[i / (kOCols / 8)];
        const int c = i % (kOCols / 8);
        store_one(o_row, p.qo.out_dtype, 8 * i + 2 * tig, ob[4 * c + 2 * r] * inv);
        store_one(o_row, p.qo.out_dtype, 8 * i + 2 * tig + 1, ob[4 * c + 2 * r + 1] * inv);
      }
    }
    if (tig == 0 && lse) lse[q_tok * p.qo.lse_token_stride + row.head * p.qo.lse_head_stride] = natural_lse(M, L);
  }
#endif
}

// Launches paged_prefill_wgmma_kernel<T, KV, prefill_kernel_dims(head_dim)> over `grid`. Instantiated
// in sm90a/prefill_wgmma_*.cu.
template <class KV>
void launch_paged_prefill_wgmma(const PrefillKernelParams& prm, dim3 grid, cudaStream_t stream) {
  constexpr bool kFp8 = sizeof(KV) == 1;
  using T = std::conditional_t<kFp8, __half, KV>;
  auto launch = [&](auto d_c, auto plain_c, auto page_major_c, auto vt_c) {
    constexpr int kD = decltype(d_c)::value;
    constexpr int kBytes = WgmmaPrefillShapeOf<kD, kFp8>::kBytes;
    auto kernel = paged_prefill_wgmma_kernel<T, KV, kD, decltype(plain_c)::value, decltype(page_major_c)::value,
                                             decltype(vt_c)::value>;
    if (allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), kBytes) != cudaSuccess) {
      return;  // reported by the caller's launch check
    }
    kernel<<<grid, WgmmaPrefillShape::kThreads, kBytes, stream>>>(prm);
  };
  const bool plain = prm.p.variant.soft_cap == 0.0f && prm.p.variant.alibi_slopes == nullptr;
  auto with_plain = [&](auto d_c, auto page_major_c, auto vt_c) {
    if (plain) launch(d_c, std::true_type{}, page_major_c, vt_c);
    else launch(d_c, std::false_type{}, page_major_c, vt_c);
  };
  with_prefill_kernel_dims(prm.p.head_dim, [&](auto d_c) {
    if constexpr (kFp8) {
      with_plain(d_c, std::false_type{}, std::false_type{});  // rows, gathered
    } else {
      if (prm.v_transposed) return with_plain(d_c, std::false_type{}, std::true_type{});
      if constexpr (decltype(d_c)::value == 128) {  // rows of other than 128 dims are never page-major
        if (prm.page_major) return with_plain(d_c, std::true_type{}, std::false_type{});
      }
      with_plain(d_c, std::false_type{}, std::false_type{});
    }
  });
}

}  // namespace pagedattn::cuda
