// Internal (CUDA): paged decode for grouped-query attention on tensor cores.
//
// With GQA a KV head serves a group of query heads, so each K/V row feeds several dot products.
// On CUDA cores that arithmetic (plus the shuffles that reduce each dot product) becomes the
// bottleneck at group sizes >= 4; here the group is the M dimension of mma.sync m16n8k16:
//   S[16 heads x 16 keys] = Q[16 x D] K^T,   O[16 x D] += P[16 x 16] V
// (rows past the group are zero queries whose results are discarded). Groups of at most 8 run
// the products transposed (kKeyRows: S^T = K Q^T, O^T += V^T P^T, keys and dims as M, the
// group as N = 8), which halves the MMAs and the accumulators per tile. K/V tiles of 16 keys
// stream through a per-warp cp.async pipeline into padded shared rows (conflict-free ldmatrix);
// a CTA's warps take its tiles in a fixed interleave or, when the caller gives up bit-identical
// results (DecodeOptions::deterministic false), from a shared counter after their first ones, so
// the one that streams faster takes more (`claim`); the softmax runs on the accumulator
// fragments (FlashAttention-2's register layout).
// Kernels for head_dim 64, 128 and 256; head dims between them (multiples of 8, of 16 with fp8)
// run zero-padded on the next size up (memory-bound: the padding costs tensor-core work, not
// bytes). Used for group size >= 4 (smaller groups too in the Hopper TMA variant,
// whose stream beats the CUDA-core kernel's even with 15 of 16 rows idle), and a 16-bit q with
// a cache of q's dtype or of fp8. With fp8, q is scaled into f16's range by a power of two and
// the K/V scales fold into the logit scale and the final output; K's fragments (B, or A with
// key rows) come straight from the fp8 rows (8 bytes per lane and pair of k-steps, widened in
// registers: the k-steps' dims are a permutation of the head dims, and q's fragments take the
// same one). V^T's A fragments with key rows at head_dim 128 are widened in registers too
// (MmaDecodeSmem::kVInRegs: the key columns and dim rows are permuted so that a lane reads 16
// bytes of each of its keys); elsewhere each lane widens the V chunks it copied to f16
// (exactly: f16 holds every e4m3 and e5m2 value) into a padded tile that ldmatrix transposes.
// On Hopper, 16-bit caches whose pages hold whole tiles take the TMA variant (kTma): one lane
// copies a tile as four tensor boxes (K and V, two 64-dim halves each) into 128-byte-swizzled
// rows and the warp waits on the stage's mbarrier instead of on its own cp.async groups. So do
// fp8 caches on the kVInRegs kernel (head_dim 128, key rows): a tile is two boxes of 16
// 128-byte rows, in the same swizzle its cp.async copies write.
// A softmax step takes one or two tiles (MmaDecodeSmem::kStep): two where few warps share an SM
// and each is bound by its step's dependent chain rather than by memory.
// At head_dim 256 the untransposed form's O fragments alone take 128 registers, so Q's A
// fragments wait in shared memory (written once per CTA, read per k-step) instead of registers
// (key rows keep them in registers: half the accumulators), and 16-bit tiles come one per step
// (two would hold 128 KB per CTA: one CTA per SM).
#pragma once

#include "cuda/async_copy.cuh"
#include "cuda/decode_kernel.cuh"
#include "cuda/decode_mma_epilogue.cuh"
#include "cuda/decode_mma_launch.h"
#include "cuda/mma_fragments.cuh"

namespace pagedattn::cuda {

// Shared memory of one CTA: staged page ids, then the per-warp cp.async pipeline
// ([stage][warp][k|v] tiles of kTokens rows) followed, for fp8 without kVInRegs, by each
// warp's widened V tile; after the loop the same region holds the warps' states for the
// final merge. Two warps per CTA: 52 KB of shared memory (bf16, head_dim 128, one tile per
// step) lets 4 CTAs share an SM, so one CTA's start (page ids, Q, pipeline fill) and end
// (merge, writes) overlap three others' streaming instead of one (two-tile steps: 69 KB,
// 3 CTAs; fp8 52 KB, 36 KB with kVInRegs).
// The TMA kernel also comes with four warps (kWideWarps), for grids too small to give every
// SM more than one CTA: there two warps alone could not keep enough tiles in flight. The fp8
// kVInRegs kernel comes with three (kFp8WideWarps: 52 KB and ~160 registers a thread, so four
// such CTAs, twelve warps, fit an SM where four two-warp CTAs give it eight; four-warp CTAs of
// one-tile steps fit only three by registers and were 1.2-1.35x slower on one-wave grids, v50).
constexpr int kMmaDecodeWarps = 2;
constexpr int kWideWarps = 4;
constexpr int kFp8WideWarps = 3;

template <class KV, int kD, bool kTma = false, int kTilesPerStep = sizeof(KV) == 1 ? 2 : 1, int kCtaWarps = kMmaDecodeWarps,
          bool kVT = false, bool kKeyRows = false>
struct MmaDecodeSmem {
  static constexpr bool kFp8 = sizeof(KV) == 1;  // then the tensor cores multiply in f16
  static constexpr int kWarps = kCtaWarps;
  static constexpr int kTokens = 16;        // keys per tile (one pipeline stage)
  static constexpr int kRowElems = kD + 8;  // 16-bit rows +16 bytes: ldmatrix rows in distinct banks
  // Tiles per softmax step: with few warps per SM (fp8 always: its widening lengthens the
  // chain) a warp is bound by the step's dependent chain (maxima, exponentials, rescale), not
  // by memory, and two tiles per step let one chain serve 32 keys. Four stages keep two tiles
  // in flight during a step, as three do for one-tile steps.
  static constexpr int kStep = kTilesPerStep;
  static constexpr int kStages = kStep == 2 ? 4 : 3;
  static constexpr int kPageChunk = 1024;
  // fp8 key rows at head_dim 128 (kVInRegs): V^T's A fragments are read from the staged fp8 rows
  // and widened in registers (no widened copy): lane (gid, tig) reads dims 16 gid .. + 15 of
  // keys tig + {0, 4, 8, 12} as 16-byte loads. For those keys to be a lane's MMA columns 2 tig,
  // 2 tig + 1, 2 tig + 8, 2 tig + 9, a tile's MMA key (column) i is key key_of_column(i) (so
  // S^T's row i reads K's row key_of_column(i)), and O^T's row r of m-tile n is dim
  // 16 (r % 8) + 2 n + r / 8. K's A fragments come as 16-byte loads too: lane (gid, tig) reads
  // chunk 4 q + tig (k-steps 4 q .. 4 q + 3, a permutation of the dims that q's fragments take)
  // of its two keys. K and V rows are unpadded 128 bytes in key order whose 16-byte chunks are
  // swizzled as the TMA unit's 128-byte swizzle places them (sm90::swizzled_offset: chunk c of row
  // r at c ^ (r % 8)); a quarter-warp's K loads (keys key_of_column(gid) of two gid, chunks of four
  // tig) then fall in distinct banks, and so do its V loads (keys tig + 4 i, chunks of two gid)
  // once the odd gid lane takes its keys in the order i ^ 1: 4 KB per stage and warp instead of
  // 5 (four three-warp CTAs fit an SM).
  static constexpr bool kVInRegs = kFp8 && kKeyRows && !kVT && kD == 128;
  static constexpr bool kSwizzledChunks = kVInRegs;
  // Other fp8 K rows are padded by 32 bytes: a half-warp's 8-byte K reads (4 keys x 4 dim blocks)
  // fall in distinct banks; their V rows are not (each lane widens the 16-byte chunks it copied).
  // TMA rows are unpadded: the 128-byte swizzle keeps ldmatrix's rows in distinct banks.
  static constexpr int kStageRowBytes = kTma || kSwizzledChunks ? kD * static_cast<int>(sizeof(KV))
                                        : kFp8                  ? kD + 32
                                                                : kRowElems * 2;
  static constexpr int kVStageRowBytes = kFp8 ? kD : kStageRowBytes;  // fp8 V rows are unpadded
  static_assert(!kSwizzledChunks || (kStageRowBytes == 128 && kVStageRowBytes == 128), "swizzled rows are 128 bytes");
  static constexpr int kChunks = kD * static_cast<int>(sizeof(KV)) / 16;  // 16-byte chunks per row
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(KV));
  static constexpr int kTileBytes = kTokens * kStageRowBytes;  // K's, and V's unless kVT
  // kVT: V's tile transposed, kD rows of the tile's 16 keys: runs of kRunKeys slots (16 bytes)
  // copied, 16-bit rows of 32 bytes whose two halves swap in rows 4-7 of every 8 (vt_offset:
  // an ldmatrix matrix's 8 rows then fall in distinct banks); fp8 rows of 16 bytes, widened
  // into such 16-bit rows.
  static constexpr int kRunKeys = 16 / static_cast<int>(sizeof(KV));
  static constexpr int kVtRowBytes = 32;
  static constexpr int kVtStageRowBytes = kFp8 ? 16 : kVtRowBytes;
  static constexpr int kVTileBytes = kVT ? kD * kVtStageRowBytes : kTokens * kVStageRowBytes;
  static constexpr int kStageWarpBytes = kTileBytes + kVTileBytes;
  static constexpr int kWideTileBytes = kVT ? kD * kVtRowBytes : kTokens * kRowElems * 2;
  static constexpr int kWideBytes = kFp8 && !kVInRegs ? kWarps * kWideTileBytes : 0;  // fp8: V widened, a tile at a time
  static constexpr int kPipeBytes = kStages * kWarps * kStageWarpBytes + kWideBytes;
  // The epilogue: warps 1.. leave their 16 rows' outputs (rows of kD + 8 floats, so that a
  // half-warp's float2 stores, four rows of four lanes, fall in distinct banks), maxima and sums.
  static constexpr int kMergeRowFloats = kD + 8;
  // kKeyRows: every warp leaves its 8 heads' outputs as rows of kD + 4 floats (a fragment's
  // stores, dims gid.. of heads 2 tig.., then fall in distinct banks), its maxima and sums, and
  // the fold's per-(warp, head) weights follow.
  static constexpr int kKeyRowHeads = 8;
  static constexpr int kOutRowFloats = kD + 4;
  static constexpr int kMergeBytes = kKeyRows ? kWarps * kKeyRowHeads * (kOutRowFloats + 3) * 4
                                              : (kWarps - 1) * 16 * (kMergeRowFloats + 2) * 4;
  static constexpr int kRegionBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
  // TMA: one mbarrier per (warp, stage) after the region, and slack to align the swizzled tiles
  // to 1024 bytes.
  static constexpr int kBarrierBytes = kTma ? kStages * kWarps * 8 : 0;
  // head_dim 256: Q's A fragments ([k-step][lane], 16 bytes each), shared by the CTA's warps.
  static constexpr bool kQInSmem = kD > 128 && !kKeyRows;  // kKeyRows: Q's B fragments take half the registers
  static constexpr int kQBytes = kQInSmem ? (kD / 16) * 32 * 16 : 0;
  // A warp's tiles past its first kStages - kStep come from a counter the CTA's warps share
  // (two: page chunks alternate), and a ring ([warp][stage]) notes the tile each stage holds.
  static constexpr int kClaimBytes = (2 + kWarps * kStages) * 4;
  static constexpr int kAlignSlack = kTma ? 1024 : 0;
  static constexpr int kBytes = kAlignSlack + kPageChunk * 4 + kRegionBytes + kBarrierBytes + kQBytes + kClaimBytes;
};

// Byte offset of 16-byte chunk c (keys 8c..8c+7) of dim row d in a kVT tile of 16-bit rows.
__device__ __forceinline__ int vt_offset(int d, int c) { return d * 32 + ((c ^ ((d >> 2) & 1)) << 4); }

// kVInRegs: the tile's key that is the MMAs' key column i (S^T's row i, P^T's row i).
__device__ __forceinline__ int key_of_column(int i) { return (i & 8) | ((i >> 1) & 3) | ((i & 1) << 2); }

// KV: the cache's storage type; T: the 16-bit type the tensor cores multiply (q's dtype, or
// f16 for fp8 caches).
// kPadded: head_dim below kD (see below); without it the kernel's code is that of head_dim kD
// alone (the padding's checks cost the d128 kernels 1-4% on H100 when they were run-time).
// kVT: V transposed (vLLM's split layout, prm.v_transposed): its tiles are staged as kD rows
// of 16 keys, 16-byte cp.async runs of slots per dim (two of 8 16-bit slots or one of 16 fp8),
// and P V reads them untransposed.
// kKeyRows (groups of at most 8): the products run transposed, S^T[16 keys x 8 heads] =
// K Q^T and O^T[D x 8 heads] += V^T P^T, so a 16-key tile takes kD / 16 MMAs for each product
// instead of kD / 8 with 16 head rows of which at most 8 are live, and each lane holds half the
// accumulators. P^T's B fragments come from the logits' C fragments by one movmatrix
// transpose per 8 keys.
template <class KV, class T, int kD, bool kTma, int kTilesPerStep, int kCtaWarps, bool kPadded, bool kVT, bool kKeyRows>
__global__ void __launch_bounds__(32 * kCtaWarps)
    paged_decode_mma_kernel(const __grid_constant__ DecodeKernelParams prm) {
  using Smem = MmaDecodeSmem<KV, kD, kTma, kTilesPerStep, kCtaWarps, kVT, kKeyRows>;
  static_assert(!kVT || !kTma, "transposed V tiles come by cp.async");
  constexpr int kWarps = Smem::kWarps, kTokens = Smem::kTokens, kStages = Smem::kStages, kStep = Smem::kStep;
  constexpr int kPageChunk = Smem::kPageChunk, kRowElems = Smem::kRowElems;
  constexpr int kG = kKeyRows ? 8 : 16;  // query heads of the mma tile (its N or M)
  constexpr int kChunks = Smem::kChunks, kChunkElems = Smem::kChunkElems;
  constexpr bool kFp8 = Smem::kFp8;
  constexpr float kNegInf = detail::kNegInf;
  static_assert(!kTma || !kFp8 || (Smem::kVInRegs && !kPadded), "fp8 TMA tiles: the kVInRegs kernel at head_dim 128");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (kTma) smem += (1024 - (sm90::smem_address(smem_raw) & 1023)) & 1023;
  auto* s_pages = reinterpret_cast<std::int32_t*>(smem);
  unsigned char* s_region = smem + kPageChunk * 4;
  auto* s_bars = reinterpret_cast<std::uint64_t*>(s_region + Smem::kRegionBytes);  // TMA: [warp][stage]
  auto* s_q = reinterpret_cast<uint4*>(s_region + Smem::kRegionBytes + Smem::kBarrierBytes);  // kQInSmem: [k-step][lane]
  // The chunk tile counters (by page chunk parity), then the warps' rings of staged tiles.
  auto* s_next = reinterpret_cast<int*>(s_region + Smem::kRegionBytes + Smem::kBarrierBytes + Smem::kQBytes);
  int* s_ring = s_next + 2;
  constexpr int kFirstTiles = kStages - kStep;  // a warp's tiles issued before its loop
  static_assert(!Smem::kQInSmem || (Smem::kRegionBytes + Smem::kBarrierBytes) % 16 == 0, "Q's fragments 16-byte aligned");

  const detail::AttentionProblem& p = prm.p;
  // The problem's head_dim: kD, or less (a multiple of 8, of 16 with fp8) run zero-padded,
  // its K/V chunks past head_dim zeros in shared memory and its output dims past it unwritten.
  const int head_dim = kPadded ? static_cast<int>(p.head_dim) : kD;
  DecodeCta cta = cta_coords(prm, kG);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;  // mma fragment coordinates

  // q first: its loads need only the block index, so they overlap init_cta's page-table reads.
  // This lane's fragment values: [k-step][row r][dims d, d+1, d+8, d+9] of query heads
  // g0 + gid + 8 * r (rows past the tile's heads are zero); with fp8, k-step kk's four dims are
  // 32 (kk / 2) + 8 tig + 4 (kk % 2) + 0..3 instead, the order K's fragments are read in
  // (kVInRegs: 16 (4 (kk / 4) + tig) + 4 (kk % 4) + 0..3, a lane's 16-byte chunk per 4 k-steps).
  // kKeyRows: only row gid (head gid as B's column) is loaded, and slope[c] is head 2 tig + c's,
  // the logits' columns.
  float qf[kD / 16][2][4];
  float slope[2];
  visit_q_type(p.qo.q_dtype, [&](auto tag) {
    using Q = typename decltype(tag)::type;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int g = gid + 8 * r;
      const std::int64_t h = static_cast<std::int64_t>(cta.kv_head) * cta.group + cta.g0 + g;
      const bool live = g < cta.n_g && (!kKeyRows || r == 0);
      if constexpr (kKeyRows) {
        const int gc = 2 * tig + r;
        slope[r] = (gc < cta.n_g && p.variant.alibi_slopes)
                       ? p.variant.alibi_slopes[static_cast<std::int64_t>(cta.kv_head) * cta.group + cta.g0 + gc]
                       : 0.0f;
      } else {
        slope[r] = (live && p.variant.alibi_slopes) ? p.variant.alibi_slopes[h] : 0.0f;
      }
      const Q* row = reinterpret_cast<const Q*>(p.qo.q) + cta.s * p.qo.q_token_stride + h * p.qo.q_head_stride;
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const int d = Smem::kVInRegs ? 16 * (4 * (kk / 4) + tig) + 4 * (kk % 4)
                      : kFp8         ? 32 * (kk / 2) + 8 * tig + 4 * (kk % 2)
                                     : kk * 16 + tig * 2;
        const int hi = kFp8 ? 2 : 8;  // offset of the fragment's second dim pair
        // Dims past the problem's head_dim (a kernel of the next size up) are zero queries.
        auto q_at = [&](int dd) { return live && dd < head_dim ? to_float(row[dd]) : 0.0f; };
        qf[kk][r][0] = q_at(d);
        qf[kk][r][1] = q_at(d + 1);
        qf[kk][r][2] = q_at(d + hi);
        qf[kk][r][3] = q_at(d + hi + 1);
      }
    }
  });
  if constexpr (kTma) {  // visible to the warp's lanes after the first stage_pages' __syncthreads
    if (lane == 0) {
      for (int st = 0; st < kStages; ++st) sm90::mbarrier_init(&s_bars[warp * kStages + st], 1);
      sm90::fence_mbarrier_init();
    }
  }
  if (threadIdx.x == 0) s_next[0] = s_next[1] = kWarps * kFirstTiles;  // past every warp's first tiles
  const std::int64_t P = p.kv.page_size;
  // A block-table row without a window: the split's first page ids sit at a place of the row
  // known from the block index, so they are requested now, beside the length init_cta reads,
  // instead of after it (one dependent global round trip less before the first tile). Ids
  // past the sequence's pages are read from the row but never used. (TMA and cp.async tiles
  // alike: both wait for the ids before their first copy.)
  const std::int64_t spec_cp0 = cta.split * prm.partition_tokens / P;
  std::int64_t spec_cp1 = spec_cp0;
  bool speculated = false;
  {
    const detail::PageTableAccess& tb = p.table;
    if (prm.speculate_pages && tb.bt_cols > 0 && p.seq_to_row == nullptr && p.variant.window_left < 0) {
      speculated = true;
      spec_cp1 = min(spec_cp0 + kPageChunk, min(tb.bt_cols, ceil_div((cta.split + 1) * prm.partition_tokens, P)));
      const std::int32_t* row = tb.block_table + cta.s * tb.bt_row_stride;
      for (std::int64_t i = threadIdx.x; i < spec_cp1 - spec_cp0; i += blockDim.x) {
        cp_async(&s_pages[i], row + (spec_cp0 + i) * tb.bt_col_stride, 4);
      }
      cp_async_commit();
    }
  }
  if (!init_cta(prm, cta)) {
    if (speculated) cp_async_wait<0>();  // no copy into shared memory outlives the CTA
    return;
  }
  const std::int64_t q_pos = cta.q_pos, t_begin = cta.t_begin, t_end = cta.t_end;
  const int kv_head = cta.kv_head;

  const float soft_cap = p.variant.soft_cap;
  const bool plain = soft_cap == 0.0f && p.variant.alibi_slopes == nullptr;
  const float k_scale = kFp8 ? p.kv.k_scale_of(kv_head) : 1.0f;
  const float v_scale = kFp8 ? p.kv.v_scale_of(kv_head) : 1.0f;
  float s_mul = p.variant.scale * k_scale * (plain ? kLog2e : 1.0f);
  const detail::KVTensorAccess& ka = p.kv.k;
  const detail::KVTensorAccess& va = p.kv.v;

  // Q as A fragments, one per 16-dim k-step; rows gid and gid + 8 are query heads g0 + row.
  std::uint32_t qa[kD / 16][4];
  pack_q_fragments<T, kD, kFp8>(qf, s_mul, qa);
  if constexpr (Smem::kQInSmem) {  // every warp packed the same fragments; warp 0 stores them
    if (warp == 0) {
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) s_q[kk * 32 + lane] = make_uint4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
    }
    // Read after the page ids' __syncthreads below (before any tile).
  }

  // O's C fragments: n-tiles of 8 dims (rows gid, gid + 8 = heads), or with kKeyRows O^T's
  // m-tiles of 16 dims (rows gid, gid + 8 = dims, columns 2 tig, 2 tig + 1 = heads).
  constexpr int kOTiles = kKeyRows ? kD / 16 : kD / 8;
  float o[kOTiles][4];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  // Rows gid, gid + 8 (kKeyRows: heads 2 tig, 2 tig + 1); l: this lane's part of the sum.
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};

  // This lane copies 16-byte chunk (lane % kChunks) of rows lane / kChunks + i * (32 / kChunks):
  // the chunk's offset within a (page, token) is fixed, computed once.
  static_assert(32 % kChunks == 0, "a warp covers whole rows");
  static_assert(!kFp8 || std::is_same_v<T, __half>, "fp8 tiles are widened to f16");
  const int lane_chunk = lane % kChunks, lane_row = lane / kChunks;
  const KV* k_base = reinterpret_cast<const KV*>(ka.data) + ka.offset(0, kv_head, 0, lane_chunk * kChunkElems);
  const KV* v_base = reinterpret_cast<const KV*>(va.data) + va.offset(0, kv_head, 0, lane_chunk * kChunkElems);
  const KV* vt_base = reinterpret_cast<const KV*>(va.data) + va.offset(0, kv_head, 0, 0);  // kVT
  constexpr int kRuns = kTokens / Smem::kRunKeys, kVtDims = 32 / kRuns;  // kVT: a tile's runs per dim, dims per pass
  unsigned char* warp_pipe = s_region + warp * Smem::kStageWarpBytes;
  // The warp's tiles go round the stages in one sequence across page chunks (tiles_done counts
  // the earlier chunks' tiles), so a stage's mbarrier phases keep counting.
  std::int64_t tiles_done = 0;
  // In 32 bits (a warp streams far fewer than 2^32 tiles): a 64-bit % and / cost ~20 instructions.
  auto tile_index = [&](std::int64_t j) { return static_cast<std::uint32_t>(tiles_done + j); };
  auto stage_of = [&](std::int64_t j) { return static_cast<int>(tile_index(j) % kStages); };
  auto stage_ptr = [&](std::int64_t j, int is_v) {
    return warp_pipe + stage_of(j) * (kWarps * Smem::kStageWarpBytes) + is_v * Smem::kTileBytes;
  };
  std::uint64_t* warp_bars = s_bars + warp * kStages;
  auto stage_parity = [&](std::int64_t j) { return (tile_index(j) / kStages) & 1; };
  // Row r, chunk c of a staged K (is_v = 0) or V tile; swizzled chunks: 128-byte rows as the
  // TMA unit writes them.
  auto chunk_ptr = [&](unsigned char* tile, int r, int c, int is_v) {
    if constexpr (Smem::kSwizzledChunks) return tile + sm90::swizzled_offset(r, c, kTokens);
    else return tile + r * (is_v ? Smem::kVStageRowBytes : Smem::kStageRowBytes) + c * 16;
  };
  // The 16-bit V tile the tensor cores read: the staged one, or (fp8) this warp's widened copy.
  T* wide = reinterpret_cast<T*>(s_region + kStages * kWarps * Smem::kStageWarpBytes + warp * Smem::kWideTileBytes);
  auto v_tile_ptr = [&](std::int64_t j) {
    if constexpr (kFp8) return wide;
    else return reinterpret_cast<T*>(stage_ptr(j, 1));
  };
  const bool page_tiles = kTma || P % kTokens == 0;  // the host takes TMA only for such pages
  // A head_dim below kD: this lane's chunk lies past the row when lane_chunk >= live_chunks, and
  // a tile's 64-dim TMA boxes past the first live_boxes lie wholly past it. Those parts of the
  // stages are never copied: they are zeroed once here (K's zeros keep the logits exact, V's the
  // unwritten output dims finite). A box that begins below head_dim is zero-filled by the copy.
  const int live_chunks = head_dim * static_cast<int>(sizeof(KV)) / 16;
  const bool lane_copies = !kPadded || lane_chunk < live_chunks;
  const int live_boxes = kPadded ? (head_dim + 63) / 64 : kD / 64;
  if (kPadded) {
    for (int st = 0; st < kStages; ++st) {
#pragma unroll
      for (int is_v = 0; is_v < (kVT ? 1 : 2); ++is_v) {  // kVT: V's rows past head_dim copy 0 bytes
        unsigned char* tile = warp_pipe + st * (kWarps * Smem::kStageWarpBytes) + is_v * Smem::kTileBytes;
        if constexpr (kTma) {
          for (int i = live_boxes * kTokens * 8 + lane; i < kD / 64 * kTokens * 8; i += 32) {
            reinterpret_cast<uint4*>(tile)[i] = make_uint4(0, 0, 0, 0);
          }
        } else {
          for (int i = lane; i < kTokens * kChunks; i += 32) {
            if (i % kChunks >= live_chunks) {
              *reinterpret_cast<uint4*>(chunk_ptr(tile, i / kChunks, i % kChunks, is_v)) = make_uint4(0, 0, 0, 0);
            }
          }
        }
      }
    }
    __syncwarp();
  }
  const std::int64_t k_row_step = (32 / kChunks) * ka.token_stride;  // between a lane's rows
  const std::int64_t v_row_step = (32 / kChunks) * va.token_stride;
  const int l2_bytes = prm.cp_async_l2_bytes;  // uniform: the copies' branch does not diverge

  int chunk = 0;
  for (std::int64_t cp0 = t_begin / P; t_begin < t_end && cp0 * P < t_end; cp0 += kPageChunk, ++chunk) {
    const std::int64_t cp1 = min(cp0 + kPageChunk, ceil_div(t_end, P));
    if (speculated && cp0 == spec_cp0 && cp1 <= spec_cp1) {  // the ids requested at the start
      cp_async_wait<0>();
      __syncthreads();
    } else {
      if (speculated) cp_async_wait<0>();  // one that missed lands before the ids are staged
      stage_pages(cta, cp0, cp1, s_pages);
    }
    speculated = false;
    // The next chunk's counter was last taken from in the chunk before this one, which every warp
    // has left (the barrier above); the next chunk's barrier orders the reset before its claims.
    int* chunk_next = s_next + (chunk & 1);
    if (threadIdx.x == 0) s_next[(chunk + 1) & 1] = kWarps * kFirstTiles;
    const std::int64_t c_begin = max(t_begin, cp0 * P), c_end = min(t_end, cp1 * P);
    // Tiles start at multiples of kTokens, so with page sizes that are multiples of kTokens a
    // tile never straddles pages; keys of a tile outside [c_begin, c_end) are masked.
    const std::int64_t c_lo = c_begin - c_begin % kTokens;
    // A chunk's keys relative to c_lo fit 32 bits (lengths are 32-bit), and so does its tile
    // count: the loop's per-tile arithmetic stays in 32 bits (a 64-bit compare, min or add takes
    // two instructions).
    const int n_tiles = static_cast<int>(ceil_div(c_end - c_lo, kTokens));
    const int begin_rel = static_cast<int>(c_begin - c_lo), end_rel = static_cast<int>(c_end - c_lo);
    // The first key of the chunk's tile t (the loop keeps t * kTokens, relative to c_lo), and the
    // tile the static interleave makes the warp's j-th (one past the chunk's tiles once they run out).
    auto tile_first_key = [&](int t) { return c_lo + static_cast<std::int64_t>(t) * kTokens; };
    auto static_tile = [&](std::int64_t j) { return min(warp + static_cast<int>(j) * kWarps, n_tiles); };
    // Element offsets of token t's row in K and V (this lane's chunk), through the page table.
    auto row_offset = [&](std::int64_t t, std::int64_t& k_off, std::int64_t& v_off) {
      const auto local = static_cast<std::uint32_t>(t - cp0 * P);
      const std::uint32_t page_idx = prm.page_div.div(local);
      const std::int64_t page = s_pages[page_idx];
      const std::int64_t slot = local - page_idx * static_cast<std::uint32_t>(P);
      k_off = page * ka.page_stride + slot * ka.token_stride;
      v_off = page * va.page_stride + slot * va.token_stride;
    };

    // The head and slot coordinates of a 4-d box (KVPageBoxes' order) of the warp's KV head.
    auto box_head_slot = [&](int slot, int& c1, int& c2) {
      c1 = prm.tma_head_inner ? kv_head : slot;
      c2 = prm.tma_head_inner ? slot : kv_head;
    };
    // TMA tiles lie in one page: the page and slot of the chunk's tile t's first key.
    const auto c_lo_local = static_cast<std::uint32_t>(c_lo - cp0 * P);  // c_lo within the chunk's pages
    auto tile_page_slot = [&](int t, int& page, int& slot) {
      const std::uint32_t local = c_lo_local + static_cast<std::uint32_t>(t) * kTokens;
      const std::uint32_t page_idx = prm.page_div.div(local);
      page = s_pages[page_idx];
      slot = static_cast<int>(local - page_idx * static_cast<std::uint32_t>(P));
    };
    // The chunk tile that is the warp's j-th: its first ones as in the static interleave, then
    // (prm.balance_warps) the next the CTA's warps have not taken, so a warp that streams faster
    // takes more and the CTA's warps end together (their static shares drift apart by
    // microseconds; H100: GQA d-mid16 -1%, fp8 16 x 4096 -1.5%; docs/perf-notes.md v42). Lengths are
    // 32-bit, so is a chunk's tile count. Lane 0 takes it and, when the warps balance, notes it
    // in the stage's ring entry for the loop (the static interleave's tile the loop computes
    // itself); one past the chunk's tiles ends the warp's loop there. Lane 0's value. (The TMA
    // path claims a step's tiles itself, in issue_boxes.)
    auto claim = [&](std::int64_t j) {
      int t = 0;
      if (lane == 0) {
        if (prm.balance_warps) {
          t = j >= kFirstTiles ? atomicAdd(chunk_next, 1) : static_tile(j);
          s_ring[warp * kStages + stage_of(j)] = t;
        } else {
          t = static_tile(j);
        }
      }
      return t;
    };
    // The TMA path: the warp's tiles j0 .. j0 + count - 1, each claimed and issued by its own
    // lane (lane h: tile j0 + h), so a step's claims, page lookups and barrier arithmetic run
    // side by side instead of one after another on lane 0 (H200: 0.2-1.3% on fp8 and bf16,
    // docs/perf-notes.md v54). Balancing warps claim the step's tiles with one atomic add, so
    // that the lanes' tiles rise with their stages as the loop's end test assumes (one add a
    // lane could hand them out in any order and leave a tile issued but never waited for).
    auto issue_boxes = [&](std::int64_t j0, int count) {
      if constexpr (kTma) {  // the cp.async instances have no barriers or tensor maps
        static_assert(kFirstTiles <= 32 && kStep <= 32, "a lane a tile");
        int claimed = 0;
        const bool counted = prm.balance_warps && j0 >= kFirstTiles;  // j0 is 0 or past the first tiles
        if (counted) {
          if (lane == 0) claimed = atomicAdd(chunk_next, count);
          claimed = __shfl_sync(0xffffffffu, claimed, 0) + lane;
        }
        if (lane >= count) return;
        const std::int64_t j = j0 + lane;
        const int t = counted ? claimed : static_tile(j);
        if (prm.balance_warps) s_ring[warp * kStages + stage_of(j)] = t;
        // The tile lies in one page (page_tiles); keys of it outside [c_begin, c_end) are in
        // that page too, so the boxes never leave the pool (their V rows are zeroed on arrival).
        if (t >= n_tiles) return;
        int page, slot;
        tile_page_slot(t, page, slot);
        int c1, c2;
        box_head_slot(slot, c1, c2);
        std::uint64_t* bar = &warp_bars[stage_of(j)];
        sm90::mbarrier_arrive_expect_tx(bar, kFp8 ? 2 * Smem::kTileBytes : 2 * live_boxes * kTokens * 128);
        const std::uint32_t k_dst = sm90::smem_address(stage_ptr(j, 0));
        const std::uint32_t v_dst = sm90::smem_address(stage_ptr(j, 1));
        // K and V are read once: their lines go first when L2 needs room (H100, whole-row
        // boxes: d-long1 -2.3%, 4 x 8192 -2.8%, d-b256 -1.3%; H200: without it 10-18% slower;
        // shared-prefix pages and the cascade unchanged; see docs/perf-notes.md). The cp.async
        // copies below carry none: with one, nvcc 13.0 emitted copies that fault as illegal
        // instructions (docs/perf-notes.md, v36).
        const std::uint64_t kv_policy = sm90::l2_evict_first_policy();
        if constexpr (kFp8) {  // one box of 16 whole 128-byte rows each
          sm90::tma_load_4d(k_dst, &prm.k_tiles, 0, c1, c2, page, bar, kv_policy);
          sm90::tma_load_4d(v_dst, &prm.v_tiles, 0, c1, c2, page, bar, kv_policy);
        } else if (prm.tma_whole_rows) {
          sm90::tma_load_5d(k_dst, &prm.k_tiles, 0, slot, 0, kv_head, page, bar, kv_policy);
          sm90::tma_load_5d(v_dst, &prm.v_tiles, 0, slot, 0, kv_head, page, bar, kv_policy);
        } else {
#pragma unroll
          for (int h = 0; h < kD / 64; ++h) {
            if (h >= live_boxes) break;
            sm90::tma_load_4d(k_dst + h * kTokens * 128, &prm.k_tiles, 64 * h, c1, c2, page, bar, kv_policy);
            sm90::tma_load_4d(v_dst + h * kTokens * 128, &prm.v_tiles, 64 * h, c1, c2, page, bar, kv_policy);
          }
        }
      }
    };
    // The cp.async path: the warp's tile j, copied by all lanes.
    auto issue_copies = [&](std::int64_t j) {
      const int tile = __shfl_sync(0xffffffffu, claim(j), 0);
      if (tile < n_tiles) {
        const std::int64_t t0 = tile_first_key(tile);
        if (page_tiles && t0 >= c_begin && t0 + kTokens <= c_end) {
          // The whole tile is one run of a page: one page-table lookup, rows at fixed steps.
          std::int64_t k_off, v_off;
          row_offset(t0 + lane_row, k_off, v_off);
#pragma unroll
          for (int i = 0; i < kTokens * kChunks / 32; ++i) {
            if (!lane_copies) break;
            const int r = lane_row + i * (32 / kChunks);
            cp_async_16_widened(chunk_ptr(stage_ptr(j, 0), r, lane_chunk, 0), k_base + k_off + i * k_row_step, l2_bytes);
            if constexpr (!kVT) {
              cp_async_16_widened(chunk_ptr(stage_ptr(j, 1), r, lane_chunk, 1), v_base + v_off + i * v_row_step, l2_bytes);
            }
          }
        } else {
#pragma unroll
          for (int i = 0; i < kTokens * kChunks / 32; ++i) {
            const int r = lane_row + i * (32 / kChunks);
            const std::int64_t t = t0 + r;
            unsigned char* k_dst = chunk_ptr(stage_ptr(j, 0), r, lane_chunk, 0);
            unsigned char* v_dst = chunk_ptr(stage_ptr(j, 1), r, lane_chunk, 1);
            if (t >= c_begin && t < c_end) {
              if (lane_copies) {
                std::int64_t k_off, v_off;
                row_offset(t, k_off, v_off);
                cp_async_16_widened(k_dst, k_base + k_off, l2_bytes);
                if constexpr (!kVT) cp_async_16_widened(v_dst, v_base + v_off, l2_bytes);
              }
            } else {  // outside the keys: zeros, so 0-weight keys cannot turn into NaN
              *reinterpret_cast<uint4*>(k_dst) = make_uint4(0, 0, 0, 0);
              if constexpr (!kVT) *reinterpret_cast<uint4*>(v_dst) = make_uint4(0, 0, 0, 0);
            }
          }
        }
        if constexpr (kVT) {
          // Lane l copies run l % kRuns (of kRunKeys slots) of dims l / kRuns + kVtDims i; a
          // run that starts before c_begin is copied whole (the keys before the range are the
          // sequence's own, finite, and masked: its page is one of the chunk's when pages hold
          // whole runs), one that ends past c_end only up to it (a page's unused slots may hold
          // NaN).
          const std::int64_t t = t0 + Smem::kRunKeys * (lane % kRuns);
          int bytes = 0;
          const KV* src = vt_base;
          if (t + Smem::kRunKeys > c_begin && t < c_end) {
            const auto local = static_cast<std::uint32_t>(t - cp0 * P);
            const std::uint32_t page_idx = prm.page_div.div(local);
            const std::int64_t page = s_pages[page_idx];
            src = vt_base + page * va.page_stride + (local - page_idx * static_cast<std::uint32_t>(P));
            bytes = static_cast<int>(sizeof(KV) * min(std::int64_t{Smem::kRunKeys}, c_end - t));
          }
          // Rows lane / kRuns + kVtDims i share their place in the swizzle (kVtDims is 16 or 32).
          const int row0 = lane / kRuns;
          const std::uint32_t dst = static_cast<std::uint32_t>(__cvta_generic_to_shared(stage_ptr(j, 1))) +
                                    (kFp8 ? row0 * Smem::kVtStageRowBytes : vt_offset(row0, lane % kRuns));
#pragma unroll
          for (int i = 0; i < kD / kVtDims; ++i) {
            const int d = row0 + kVtDims * i;
            cp_async_16_prefix(dst + kVtDims * i * Smem::kVtStageRowBytes, src + d * va.elem_stride,
                               !kPadded || d < head_dim ? bytes : 0);
          }
        }
      }
      cp_async_commit();
    };

    if constexpr (kTma) {
      issue_boxes(0, kFirstTiles);
    } else {
#pragma unroll
      for (int j = 0; j < kFirstTiles; ++j) issue_copies(j);
    }
    if constexpr (kTma) {  // the warp's next tiles past the pipeline, asked of L2 at entry (prm.entry_prefetch_tiles)
      if (tiles_done == 0 && lane == 0 && (kFp8 || prm.tma_whole_rows)) {
        // The tiles of the static interleave: with balance_warps whichever warp takes them
        // finds them in L2.
        for (std::int64_t j = kFirstTiles; j < kFirstTiles + prm.entry_prefetch_tiles && static_tile(j) < n_tiles; ++j) {
          int page, slot;
          tile_page_slot(static_tile(j), page, slot);
          if constexpr (kFp8) {  // the 4-d maps of whole 128-byte rows
            int c1, c2;
            box_head_slot(slot, c1, c2);
            sm90::tma_prefetch_4d(&prm.k_tiles, 0, c1, c2, page);
            sm90::tma_prefetch_4d(&prm.v_tiles, 0, c1, c2, page);
          } else {
            sm90::tma_prefetch_5d(&prm.k_tiles, 0, slot, 0, kv_head, page);
            sm90::tma_prefetch_5d(&prm.v_tiles, 0, slot, 0, kv_head, page);
          }
        }
      }
    }
    std::int64_t consumed = 0;  // the warp's tiles of this chunk
    for (std::int64_t j = 0;; j += kStep) {
      __syncwarp();  // every lane is done reading the stages about to be refilled
      // The first key of each of the step's tiles relative to c_lo, and how many of them exist:
      // with an odd count the last step has one (warp-uniform): from the ring, written when they
      // were claimed, or the static interleave's.
      int t0s[kStep];
      int step_tiles = kStep;
#pragma unroll
      for (int h = 0; h < kStep; ++h) {
        const int t = prm.balance_warps ? s_ring[warp * kStages + stage_of(j + h)] : static_tile(j + h);
        if (t >= n_tiles) step_tiles = min(step_tiles, h);
        t0s[h] = t * kTokens;
      }
      if (step_tiles <= 0) break;
      consumed += step_tiles;
      if constexpr (kTma) {
        issue_boxes(j + kFirstTiles, kStep);
      } else {
#pragma unroll
        for (int h = 0; h < kStep; ++h) issue_copies(j + kFirstTiles + h);
      }
      if constexpr (kTma) {
#pragma unroll
        for (int h = 0; h < kStep; ++h) {
          if (h >= step_tiles) break;  // never issued
          sm90::mbarrier_wait(&warp_bars[stage_of(j + h)], stage_parity(j + h));
          const int t0 = t0s[h];
          if (t0 < begin_rel || t0 + kTokens > end_rel) {  // zero the V rows outside the keys (may hold NaN)
            unsigned char* v_tile = stage_ptr(j + h, 1);
#pragma unroll
            for (int i = lane; i < kTokens * kChunks; i += 32) {
              const int r = i / kChunks, c = i % kChunks;
              if (t0 + r < begin_rel || t0 + r >= end_rel) {
                *reinterpret_cast<uint4*>(v_tile + sm90::swizzled_offset(r, c, kTokens)) = make_uint4(0, 0, 0, 0);
              }
            }
            sm90::fence_shared_for_async();  // before a later box lands on these rows
          }
        }
      } else {
        cp_async_wait<kStages - kStep>();  // the step's tiles have landed
      }
      // fp8: widen the V chunks of tile jj that this lane copied (its own copies have landed).
      auto widen_v = [&](std::int64_t jj) {
        if constexpr (kVT) {  // this lane's runs: dims lane + 32 i, one run of 16 slots each
#pragma unroll
          for (int i = 0; i < kD / 32; ++i) {
            const int d = lane + 32 * i;
            const uint4 raw = *reinterpret_cast<const uint4*>(stage_ptr(jj, 1) + d * Smem::kVtStageRowBytes);
            auto* wide_bytes = reinterpret_cast<unsigned char*>(wide);
            widen_fp8x16_to_f16<KV>(raw, *reinterpret_cast<uint4*>(wide_bytes + vt_offset(d, 0)),
                                    *reinterpret_cast<uint4*>(wide_bytes + vt_offset(d, 1)));
          }
        } else {
#pragma unroll
          for (int i = 0; i < kTokens * kChunks / 32; ++i) {
            const int r = lane_row + i * (32 / kChunks);
            const uint4 raw = *reinterpret_cast<const uint4*>(chunk_ptr(stage_ptr(jj, 1), r, lane_chunk, 1));
            uint4* dst = reinterpret_cast<uint4*>(wide + r * kRowElems + lane_chunk * 16);
            widen_fp8x16_to_f16<KV>(raw, dst[0], dst[1]);
          }
        }
      };
      if constexpr (kFp8 && !Smem::kVInRegs) widen_v(j);
      __syncwarp();  // tile j, copied (and V widened) by all lanes, is visible to all lanes

      // Logits of the step's tiles: n-tiles 2 h and 2 h + 1 are tile j + h's keys. A step's
      // second tile past the warp's last (an odd count) is a stale stage whose keys the mask
      // below drops (a select: stale NaN cannot leak) and whose P V is skipped.
      float sc[2 * kStep][4] = {};
      // K's B fragments of k-steps kk, kk + 1 for keys nt * 8 .. nt * 8 + 7 of tile j + h.
      auto k_fragments = [&](int h, int nt, int kk, std::uint32_t (&b)[4]) {
        const T* k_tile = reinterpret_cast<const T*>(stage_ptr(j + h, 0));
        if constexpr (kFp8) {  // key nt*8 + gid, dims 32 (kk / 2) + 8 tig .. + 7
          const uint2 raw = *reinterpret_cast<const uint2*>(reinterpret_cast<const unsigned char*>(k_tile) +
                                                            (nt * 8 + gid) * Smem::kStageRowBytes + kk * 16 + tig * 8);
          b[0] = fp8x2_to_f16x2<KV>(raw.x, 0), b[1] = fp8x2_to_f16x2<KV>(raw.x, 1);
          b[2] = fp8x2_to_f16x2<KV>(raw.y, 0), b[3] = fp8x2_to_f16x2<KV>(raw.y, 1);
        } else if constexpr (kTma) {
          const auto* base = reinterpret_cast<const unsigned char*>(k_tile);
          ldmatrix_x4<false>(b, reinterpret_cast<const T*>(
                                    base + sm90::swizzled_offset(nt * 8 + (lane & 7), 2 * kk + (lane >> 3), kTokens)));
        } else {
          ldmatrix_x4<false>(b, k_tile + (nt * 8 + (lane & 7)) * kRowElems + kk * 16 + (lane >> 3) * 8);
        }
      };
      // kKeyRows: K's A fragments of k-steps kk and kk + 1 for the tile's 16 keys (rows gid, gid + 8).
      auto k_row_fragments = [&](int h, int kk, std::uint32_t (&a0)[4], std::uint32_t (&a1)[4]) {
        const T* k_tile = reinterpret_cast<const T*>(stage_ptr(j + h, 0));
        if constexpr (kFp8) {  // keys gid and gid + 8, dims 32 (kk / 2) + 8 tig .. + 7 (q's permutation)
          // Bytes 8 tig.. of the row's chunk pair kk, kk + 1 (padded rows, unswizzled).
          const auto* rows = reinterpret_cast<const unsigned char*>(k_tile) + (kk + (tig >> 1)) * 16 + (tig & 1) * 8;
          const uint2 r0 = *reinterpret_cast<const uint2*>(rows + gid * Smem::kStageRowBytes);
          const uint2 r1 = *reinterpret_cast<const uint2*>(rows + (gid + 8) * Smem::kStageRowBytes);
          a0[0] = fp8x2_to_f16x2<KV>(r0.x, 0), a0[1] = fp8x2_to_f16x2<KV>(r1.x, 0);
          a0[2] = fp8x2_to_f16x2<KV>(r0.x, 1), a0[3] = fp8x2_to_f16x2<KV>(r1.x, 1);
          a1[0] = fp8x2_to_f16x2<KV>(r0.y, 0), a1[1] = fp8x2_to_f16x2<KV>(r1.y, 0);
          a1[2] = fp8x2_to_f16x2<KV>(r0.y, 1), a1[3] = fp8x2_to_f16x2<KV>(r1.y, 1);
        } else {
          const int key = (lane & 7) + ((lane >> 3) & 1) * 8, half = lane >> 4;
          if constexpr (kTma) {
            const auto* base = reinterpret_cast<const unsigned char*>(k_tile);
            ldmatrix_x4<false>(a0, reinterpret_cast<const T*>(base + sm90::swizzled_offset(key, 2 * kk + half, kTokens)));
            ldmatrix_x4<false>(a1, reinterpret_cast<const T*>(base + sm90::swizzled_offset(key, 2 * kk + 2 + half, kTokens)));
          } else {
            ldmatrix_x4<false>(a0, k_tile + key * kRowElems + kk * 16 + half * 8);
            ldmatrix_x4<false>(a1, k_tile + key * kRowElems + kk * 16 + 16 + half * 8);
          }
        }
      };
      if constexpr (Smem::kVInRegs) {  // S^T = K Q^T, K's A fragments of four k-steps per 16-byte load
        // Rows gid and gid + 8 are keys key_of_column(gid) and + 8; chunk 4 q + tig of each holds
        // dims 4 s .. 4 s + 3 of its k-step 4 q + s (word s): columns 2 tig, + 1 and 2 tig + 8, + 9.
        const int key = key_of_column(gid);
#pragma unroll
        for (int h = 0; h < kStep; ++h) {
          unsigned char* k_tile = stage_ptr(j + h, 0);
#pragma unroll
          for (int q = 0; q < kD / 64; ++q) {
            const uint4 r0 = *reinterpret_cast<const uint4*>(chunk_ptr(k_tile, key, 4 * q + tig, 0));
            const uint4 r1 = *reinterpret_cast<const uint4*>(chunk_ptr(k_tile, key + 8, 4 * q + tig, 0));
            const std::uint32_t w0[4] = {r0.x, r0.y, r0.z, r0.w}, w1[4] = {r1.x, r1.y, r1.z, r1.w};
#pragma unroll
            for (int st = 0; st < 4; ++st) {
              const std::uint32_t a[4] = {fp8x2_to_f16x2<KV>(w0[st], 0), fp8x2_to_f16x2<KV>(w1[st], 0),
                                          fp8x2_to_f16x2<KV>(w0[st], 1), fp8x2_to_f16x2<KV>(w1[st], 1)};
              mma16816<T>(sc[h], a, qa[4 * q + st][0], qa[4 * q + st][2]);
            }
          }
        }
      } else if constexpr (kKeyRows) {  // S^T = K Q^T: Q's B fragments are qa[kk][0] and qa[kk][2] (row gid)
#pragma unroll
        for (int h = 0; h < kStep; ++h) {
#pragma unroll
          for (int kk = 0; kk < kD / 16; kk += 2) {
            std::uint32_t a0[4], a1[4];
            k_row_fragments(h, kk, a0, a1);
            mma16816<T>(sc[h], a0, qa[kk][0], qa[kk][2]);
            mma16816<T>(sc[h], a1, qa[kk + 1][0], qa[kk + 1][2]);
          }
        }
      } else if constexpr (Smem::kQInSmem) {  // each k-step pair's Q fragments read once for both key halves
#pragma unroll
        for (int h = 0; h < kStep; ++h) {
#pragma unroll
          for (int kk = 0; kk < kD / 16; kk += 2) {
            const uint4 q0 = s_q[kk * 32 + lane], q1 = s_q[(kk + 1) * 32 + lane];
            const std::uint32_t a0[4] = {q0.x, q0.y, q0.z, q0.w}, a1[4] = {q1.x, q1.y, q1.z, q1.w};
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
              std::uint32_t b[4];
              k_fragments(h, nt, kk, b);
              mma16816<T>(sc[2 * h + nt], a0, b[0], b[1]);
              mma16816<T>(sc[2 * h + nt], a1, b[2], b[3]);
            }
          }
        }
      } else {
#pragma unroll
        for (int h = 0; h < kStep; ++h) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int kk = 0; kk < kD / 16; kk += 2) {
              std::uint32_t b[4];
              k_fragments(h, nt, kk, b);
              mma16816<T>(sc[2 * h + nt], qa[kk], b[0], b[1]);
              mma16816<T>(sc[2 * h + nt], qa[kk + 1], b[2], b[3]);
            }
          }
        }
      }
      // Logits (base 2), keys outside [c_begin, c_end) masked: keys lo .. hi - 1 of a tile are
      // inside (most tiles lie wholly inside, and all of this is in 32 bits). Plain logits keep
      // their scale until the exponent's FFMA (s_mul > 0: the host checked scale > 0 and the fp8
      // scales > 0, so the maxima keep their order). Element e of a C fragment is row
      // gid + 8 (e >> 1), column 2 tig + (e & 1): a (head, key) pair, or with kKeyRows (key, head).
      constexpr int kScTiles = kKeyRows ? kStep : 2 * kStep;
      float rmax[2] = {kNegInf, kNegInf};
      const int key_row0 = kKeyRows && Smem::kVInRegs ? key_of_column(gid) : gid;  // kKeyRows: key of row gid
#pragma unroll
      for (int h = 0; h < kStep; ++h) {
        const int t0 = t0s[h];
        const int lo = min(max(begin_rel - t0, 0), kTokens), hi = min(max(end_rel - t0, 0), kTokens);
        const float t0_from_q = static_cast<float>(c_lo + t0 - q_pos);  // ALiBi's distance of key 0
#pragma unroll
        for (int nt = 0; nt < kScTiles / kStep; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = kKeyRows ? e & 1 : e >> 1;  // the state's row (head) of the element
            const int k = kKeyRows ? key_row0 + 8 * (e >> 1) : nt * 8 + tig * 2 + (e & 1);
            float& x = sc[(kScTiles / kStep) * h + nt][e];
            if (!plain) {
              x *= s_mul;
              if (soft_cap > 0.0f) x = soft_cap * tanhf(x / soft_cap);
              x = (x + slope[r] * (t0_from_q + static_cast<float>(k))) * kLog2e;
            }
            x = k >= lo && k < hi ? x : kNegInf;
            rmax[r] = fmaxf(rmax[r], x);
          }
        }
      }
      const float p_mul = plain ? s_mul : 1.0f;  // what still multiplies the logits in sc
      float corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        // A head's keys lie across the quad's lanes, or with kKeyRows across the 8 gid lanes.
#pragma unroll
        for (int off = kKeyRows ? 4 : 1; off < (kKeyRows ? 32 : 4); off *= 2) {
          rmax[r] = fmaxf(rmax[r], __shfl_xor_sync(0xffffffffu, rmax[r], off));
        }
        const float m_new = fmaxf(m[r], rmax[r] * p_mul);
        corr[r] = m_new == kNegInf ? 1.0f : fast_exp2(m[r] - m_new);
        m[r] = m_new;
        l[r] *= corr[r];
      }
      float pr[kScTiles][4];
#pragma unroll
      for (int nt = 0; nt < kScTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = kKeyRows ? e & 1 : e >> 1;
          // A row with no key yet has m = -inf and only -inf logits: 2^(-inf - 0) = 0.
          pr[nt][e] = fast_exp2(fmaf(sc[nt][e], p_mul, m[r] == kNegInf ? 0.0f : -m[r]));
          l[r] += pr[nt][e];
        }
      }
      // P of tile j + h as the A fragment of its 16-key k-step, or with kKeyRows P^T as the
      // B fragment (keys 2 tig.. and 2 tig + 8.. of head gid: the logits' pairs transposed).
      std::uint32_t pa[kStep][4];
#pragma unroll
      for (int h = 0; h < kStep; ++h) {
        if constexpr (kKeyRows) {
          pa[h][0] = movmatrix_trans(pack2<T>(pr[h][0], pr[h][1]));
          pa[h][1] = movmatrix_trans(pack2<T>(pr[h][2], pr[h][3]));
        } else {
          pa[h][0] = pack2<T>(pr[2 * h][0], pr[2 * h][1]);
          pa[h][1] = pack2<T>(pr[2 * h][2], pr[2 * h][3]);
          pa[h][2] = pack2<T>(pr[2 * h + 1][0], pr[2 * h + 1][1]);
          pa[h][3] = pack2<T>(pr[2 * h + 1][2], pr[2 * h + 1][3]);
        }
      }
      // The running maxima settle after the first tiles: skip the rescale while they hold.
      if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
        for (int n = 0; n < kOTiles; ++n) {
          if constexpr (kKeyRows) {
            o[n][0] *= corr[0], o[n][1] *= corr[1], o[n][2] *= corr[0], o[n][3] *= corr[1];
          } else {
            o[n][0] *= corr[0], o[n][1] *= corr[0], o[n][2] *= corr[1], o[n][3] *= corr[1];
          }
        }
      }
      // O += P V (O^T += V^T P^T) a tile at a time (fp8's widened V holds one tile).
#pragma unroll
      for (int h = 0; h < kStep; ++h) {
        if (h > 0) {
          if (h >= step_tiles) break;
          if constexpr (kFp8 && !Smem::kVInRegs) {
            __syncwarp();  // every lane's ldmatrix of the previous tile's widened V is done
            widen_v(j + h);
            __syncwarp();
          }
        }
        if constexpr (Smem::kVInRegs) {
          // V^T's A fragments straight from the staged fp8 rows: keys tig + 4 i (columns 2 tig,
          // 2 tig + 1, 2 tig + 8, 2 tig + 9), dims 16 gid .. + 15; m-tile n takes dims 16 gid + 2 n
          // (row gid) and + 1 (row gid + 8), bytes 2 (n % 2) and + 1 of word n / 2. A lane of odd
          // gid loads key tig + 4 (i ^ 1) as vr[i] (its chunks then lie in the other half of the
          // banks than its even neighbour's) and swaps the byte pairs' sources back (sel ^ 0x4444).
          unsigned char* v_tile = stage_ptr(j + h, 1);
          const int odd = gid & 1;
          uint4 vr[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) vr[i] = *reinterpret_cast<const uint4*>(chunk_ptr(v_tile, tig + 4 * (i ^ odd), gid, 1));
          auto word = [](const uint4& v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; };
          const unsigned swap_sel = odd ? 0x4444u : 0u;
#pragma unroll
          for (int n = 0; n < kOTiles; ++n) {
            // bytes b, b of the pair's rows, then b + 1
            const unsigned sel = (n % 2 == 0 ? 0x5140u : 0x7362u) ^ swap_sel;
            const std::uint32_t lo = __byte_perm(word(vr[0], n / 2), word(vr[1], n / 2), sel);
            const std::uint32_t hi = __byte_perm(word(vr[2], n / 2), word(vr[3], n / 2), sel);
            const std::uint32_t a[4] = {fp8x2_to_f16x2<KV>(lo, 0), fp8x2_to_f16x2<KV>(lo, 1),
                                        fp8x2_to_f16x2<KV>(hi, 0), fp8x2_to_f16x2<KV>(hi, 1)};
            mma16816<T>(o[n], a, pa[h][0], pa[h][1]);
          }
        } else if constexpr (kKeyRows) {
          // V^T's A fragment of dims 16 n..: matrices (dims +0-7 | +8-15) x (keys 0-7 | 8-15).
          const T* v_tile = v_tile_ptr(j + h);
#pragma unroll
          for (int n = 0; n < kOTiles; ++n) {
            std::uint32_t a[4];
            const int dim_half = (lane >> 3) & 1, key_half = lane >> 4;
            if constexpr (kVT) {  // rows are dims: untransposed
              const auto* base = reinterpret_cast<const unsigned char*>(v_tile);
              ldmatrix_x4<false>(a, reinterpret_cast<const T*>(base + vt_offset(n * 16 + (lane & 7) + dim_half * 8, key_half)));
            } else if constexpr (kTma) {
              const auto* base = reinterpret_cast<const unsigned char*>(v_tile);
              ldmatrix_x4<true>(a, reinterpret_cast<const T*>(base + sm90::swizzled_offset((lane & 7) + key_half * 8, 2 * n + dim_half, kTokens)));
            } else {
              ldmatrix_x4<true>(a, v_tile + ((lane & 7) + key_half * 8) * kRowElems + n * 16 + dim_half * 8);
            }
            mma16816<T>(o[n], a, pa[h][0], pa[h][1]);
          }
        } else {
          const T* v_tile = v_tile_ptr(j + h);
#pragma unroll
          for (int n = 0; n < kD / 8; n += 2) {
            std::uint32_t b[4];  // dims n*8.. and (n+1)*8.., keys 0-7 and 8-15
            const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8;
            if constexpr (kVT) {  // rows: dims n*8.. and (n+1)*8..; columns: keys 0-7 and 8-15
              const auto* base = reinterpret_cast<const unsigned char*>(v_tile);
              ldmatrix_x4<false>(b, reinterpret_cast<const T*>(base + vt_offset(n * 8 + (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1)));
            } else if constexpr (kTma) {
              const auto* base = reinterpret_cast<const unsigned char*>(v_tile);
              ldmatrix_x4<true>(b, reinterpret_cast<const T*>(base + sm90::swizzled_offset(v_row, n + (lane >> 4), kTokens)));
            } else {
              ldmatrix_x4<true>(b, v_tile + v_row * kRowElems + n * 8 + (lane >> 4) * 8);
            }
            mma16816<T>(o[n], pa[h], b[0], b[1]);
            mma16816<T>(o[n + 1], pa[h], b[2], b[3]);
          }
        }
      }
    }
    if constexpr (!kTma) cp_async_wait<0>();
    tiles_done += consumed;
  }
  if (speculated) cp_async_wait<0>();  // an empty split never staged its ids

  if constexpr (kKeyRows) {
    write_key_rows_result<Smem, T, kD, kPadded>(prm, cta, o, m, l, head_dim, v_scale, s_region);
  } else {
    write_head_rows_result<Smem, T, kD>(prm, cta, o, m, l, head_dim, v_scale, s_region);
  }
}

// Launches paged_decode_mma_kernel<KV, T, kD, kTma, tiles per step, warps, padded> (T bf16 or
// f16; KV = T, or fp8 with T = f16; kD 64, 128 or 256, the smallest that holds head_dim, padded
// when it is larger). fp8 takes two tiles per step and the cp.async 16-bit kernel one;
// the TMA kernel takes two when `pair_steps` (its four stages fit three CTAs per SM instead of
// four), and four warps per CTA when `wide`; `key_rows` the transposed products. fp8 with key
// rows at kD 128 (V rows, not transposed) takes three warps when `wide`; with kTma it runs
// only that kernel (head_dim 128, key rows), with two warps or, when `wide`, three.
// Instantiated in instantiations/decode_mma_*.cu, and with kTma in sm90a/decode_mma_tma_*.cu.
template <class KV, class T, bool kTma>
void launch_paged_decode_mma(const DecodeKernelParams& prm, int head_dim, bool pair_steps, bool wide, bool key_rows,
                             dim3 grid, cudaStream_t stream) {
  auto launch_rows = [&](auto d_c, auto step_c, auto warps_c, auto padded_c, auto vt_c, auto rows_c) {
    constexpr int kD = decltype(d_c)::value, kStep = decltype(step_c)::value, kWarps = decltype(warps_c)::value;
    constexpr bool kVT = decltype(vt_c)::value, kKeyRows = decltype(rows_c)::value;
    constexpr int kBytes = MmaDecodeSmem<KV, kD, kTma, kStep, kWarps, kVT, kKeyRows>::kBytes;
    auto kernel = paged_decode_mma_kernel<KV, T, kD, kTma, kStep, kWarps, decltype(padded_c)::value, kVT, kKeyRows>;
    if (allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), kBytes) != cudaSuccess) {
      return;  // reported by the caller's launch check
    }
    kernel<<<grid, 32 * kWarps, kBytes, stream>>>(prm);
  };
  auto launch_as = [&](auto d_c, auto step_c, auto warps_c, auto padded_c, auto vt_c) {
    if (key_rows) launch_rows(d_c, step_c, warps_c, padded_c, vt_c, std::true_type{});
    else launch_rows(d_c, step_c, warps_c, padded_c, vt_c, std::false_type{});
  };
  auto launch = [&](auto d_c, auto step_c, auto warps_c, auto padded_c) {
    if constexpr (!kTma) {
      if (prm.v_transposed) return launch_as(d_c, step_c, warps_c, padded_c, std::true_type{});
    }
    launch_as(d_c, step_c, warps_c, padded_c, std::false_type{});
  };
  auto with_padding = [&](auto d_c, auto step_c, auto warps_c) {
    if (head_dim != decltype(d_c)::value) launch(d_c, step_c, warps_c, std::true_type{});
    else launch(d_c, step_c, warps_c, std::false_type{});
  };
  auto with_warps = [&](auto d_c, auto step_c) {
    if constexpr (kTma) {
      if (wide) return with_padding(d_c, step_c, std::integral_constant<int, kWideWarps>{});
    }
    with_padding(d_c, step_c, std::integral_constant<int, kMmaDecodeWarps>{});
  };
  auto with_step = [&](auto d_c) {
    constexpr int kD = decltype(d_c)::value;
    using One = std::integral_constant<int, 1>;
    using Two = std::integral_constant<int, 2>;
    using Fp8Wide = std::integral_constant<int, kFp8WideWarps>;
    if constexpr (sizeof(KV) == 1 && kTma) {  // the host takes fp8 TMA tiles for kVInRegs at head_dim 128 alone
      if constexpr (kD == 128) {
        if (wide) launch_rows(d_c, Two{}, Fp8Wide{}, std::false_type{}, std::false_type{}, std::true_type{});
        else launch_rows(d_c, Two{}, Two{}, std::false_type{}, std::false_type{}, std::true_type{});
      }
    } else if constexpr (sizeof(KV) == 1) {
      if constexpr (kD == 128) {
        if (wide && fp8_kernel_has_wide_ctas(head_dim, key_rows, prm.v_transposed)) {  // kVInRegs, three warps
          if (head_dim != 128) return launch_rows(d_c, Two{}, Fp8Wide{}, std::true_type{}, std::false_type{}, std::true_type{});
          return launch_rows(d_c, Two{}, Fp8Wide{}, std::false_type{}, std::false_type{}, std::true_type{});
        }
      }
      with_warps(d_c, Two{});
    } else if constexpr (!kTma || kD > 128) {
      with_warps(d_c, One{});
    } else {
      if (pair_steps) with_warps(d_c, Two{});
      else with_warps(d_c, One{});
    }
  };
  if (mma_kernel_dim(head_dim) == 64) with_step(std::integral_constant<int, 64>{});
  else if (mma_kernel_dim(head_dim) == 128) with_step(std::integral_constant<int, 128>{});
  else with_step(std::integral_constant<int, 256>{});
}

}  // namespace pagedattn::cuda
