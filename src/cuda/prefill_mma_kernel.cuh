// Internal (CUDA): paged prefill / append on tensor cores (mma.sync m16n8k16, sm_80+).
//
// A CTA takes the packed query rows of one sequence and one KV head: row i is query token
// i / group, head i % group of the head's group, so a group's query heads share every K/V tile
// (GQA packing) and MHA rows are simply tokens. Each of the 4 warps owns one or two 16-row
// m-tiles (the mma M dimension; two up to head_dim 128, so that every K and V fragment it loads
// feeds two MMAs and the two rows' chains interleave; one at 256, whose output fragments alone
// fill half the registers); its Q fragments wait in shared memory. K/V tiles of 64 keys (32 at
// head_dim 256) stream into padded shared rows through a two-stage cp.async pipeline that all
// warps share, the rows' page offsets computed once per tile. Per 32-key sub-tile a warp
// computes S = Q K^T, masks it (causal, window), runs the online softmax on the accumulator
// fragments and adds P V into its output fragments.
// Head dims: the kernel's kD is 64, 128 or 256; a smaller head_dim (a multiple of 8, or of 16
// for fp8) runs on the next one with its dims past head_dim zero in Q, K and V (the dot products
// and outputs are unchanged), those dims neither read nor written.
// V tiles: rows of keys (NHD, HND), or with kVT, V transposed (vLLM's split layout, where a
// page's V is [dim][slot]): kD rows of the tile's keys, copied as 16-byte runs of keys when a
// run lies in one page (element by element otherwise, e.g. page sizes below a run), which the
// P V step reads with the untransposed ldmatrix (as S reads K).
// fp8 caches: tiles land unpadded, each thread widens the chunks it copied to f16 (exact), q is
// scaled into f16's range by a power of two per warp, the K/V scales fold into the logit scale
// and the output.
#pragma once

#include "cuda/decode_kernel.cuh"
#include "cuda/mma_fragments.cuh"
#include "cuda/prefill_params.cuh"

namespace pagedattn::cuda {

constexpr int kPrefillThreads = 128;

template <class KV, int kD, bool kVT = false>
struct PrefillSmem {
  static constexpr bool kFp8 = sizeof(KV) == 1;
  static constexpr int kWarps = kPrefillThreads / 32;
  static constexpr int kMTiles = kD > 128 ? 1 : 2;   // 16-row mma tiles per warp
  static constexpr int kRows = kWarps * kMTiles * 16;  // packed query rows per CTA
  // Q's A fragments, lane by lane ([warp][m-tile][k-step][lane], 16 bytes each): reloaded per
  // tile instead of held in registers, which two m-tiles of output accumulators need.
  static constexpr int kQBytes = kWarps * kMTiles * (kD / 16) * 32 * 16;
  static constexpr int kKeys = kD > 128 ? 32 : 64;  // keys per tile (64 keys of 256 dims in two stages: past sm_80's limit)
  static constexpr int kSub = 32;            // keys per online-softmax step
  static constexpr int kStages = 2;
  static constexpr int kPageChunk = 1024;    // page ids staged at a time
  static constexpr int kRowElems = kD + 8;   // padded 16-bit rows: conflict-free ldmatrix
  static constexpr int kStageRowBytes = kFp8 ? kD : kRowElems * 2;
  static constexpr int kChunks = kD * static_cast<int>(sizeof(KV)) / 16;  // 16-byte chunks per row
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(KV));
  static constexpr int kRowsPerPass = kPrefillThreads / kChunks;  // tile rows one copy pass covers
  static constexpr int kPasses = kKeys / kRowsPerPass;
  static constexpr int kTileBytes = kKeys * kStageRowBytes;
  // kVT: V's tile as kD rows of kKeys keys (padded 16-bit rows: conflict-free ldmatrix), each
  // row copied as runs of kChunkElems keys.
  static constexpr int kVtRowElems = kKeys + 8;
  static constexpr int kVtStageRowBytes = kFp8 ? kKeys : kVtRowElems * 2;
  static constexpr int kVtChunks = kKeys * static_cast<int>(sizeof(KV)) / 16;  // runs per dim row
  static constexpr int kVtRowsPerPass = kPrefillThreads / kVtChunks;
  static constexpr int kVtPasses = kD / kVtRowsPerPass;
  static constexpr int kVTileBytes = kVT ? kD * kVtStageRowBytes : kTileBytes;
  static constexpr int kStageBytes = kTileBytes + kVTileBytes;
  static constexpr int kWideTileBytes = kKeys * kRowElems * 2;
  static constexpr int kWideVBytes = kVT ? kD * kVtRowElems * 2 : kWideTileBytes;
  static constexpr int kWideBytes = kFp8 ? kWideTileBytes + kWideVBytes : 0;
  static constexpr int kOffsetBytes = 2 * kKeys * 16;  // two tiles' row offsets (K, V)
  static constexpr int kBytes = kQBytes + kOffsetBytes + kPageChunk * 4 + kStages * kStageBytes + kWideBytes;
  static_assert(kRowsPerPass <= kKeys && kKeys % kRowsPerPass == 0, "copy passes cover whole tiles");
  static_assert(kD % kVtRowsPerPass == 0, "copy passes cover whole transposed tiles");
};

// KV: the cache's storage type; T: the 16-bit type the tensor cores multiply (q's dtype, or
// f16 for fp8 caches); kPlain: no soft-cap and no ALiBi (a smaller tile loop, which matters:
// the loop does not fit the instruction cache otherwise); kVT: V transposed (see above). Grid:
// (packed row tile, KV head + num_kv_heads * split, sequence).
template <class KV, class T, int kD, bool kPlain, bool kVT>
__global__ void __launch_bounds__(kPrefillThreads)
    paged_prefill_mma_kernel(const __grid_constant__ PrefillKernelParams prm) {
  using Smem = PrefillSmem<KV, kD, kVT>;
  constexpr int kKeys = Smem::kKeys, kSub = Smem::kSub, kStages = Smem::kStages, kRowElems = Smem::kRowElems;
  constexpr int kChunks = Smem::kChunks, kChunkElems = Smem::kChunkElems, kPageChunk = Smem::kPageChunk;
  constexpr bool kFp8 = Smem::kFp8;
  constexpr float kNegInf = detail::kNegInf;
  constexpr unsigned kAll = 0xffffffffu;
  static_assert(!kFp8 || std::is_same_v<T, __half>, "fp8 tiles are widened to f16");
  extern __shared__ __align__(16) unsigned char smem[];
  // Row offsets of two tiles (K, V elements from the head's base; -1: outside the keys, zeros).
  auto* s_q = reinterpret_cast<uint4*>(smem);
  auto* s_offsets = reinterpret_cast<longlong2*>(smem + Smem::kQBytes);
  auto* s_pages = reinterpret_cast<std::int32_t*>(smem + Smem::kQBytes + Smem::kOffsetBytes);
  unsigned char* s_pipe = smem + Smem::kQBytes + Smem::kOffsetBytes + kPageChunk * 4;
  T* s_wide = reinterpret_cast<T*>(s_pipe + kStages * Smem::kStageBytes);

  const detail::AttentionProblem& p = prm.p;
  PrefillTile cta;
  if (!prefill_tile(prm, Smem::kRows, cta)) return;
  const std::int64_t split = cta.split, q0 = cta.q0, n_q = cta.n_q, row0 = cta.row0, kv_len = cta.kv_len;
  const std::int64_t first_pos = cta.first_pos, t_begin = cta.t_begin, t_end = cta.t_end;
  const int kv_head = cta.kv_head, group = cta.group;
  const detail::SeqPages pages = cta.pages;
  auto query_token = [&](std::int64_t i) -> std::int64_t { return prm.q_index ? prm.q_index[q0 + i] : q0 + i; };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  // Dims at or past head_dim (a multiple of 8) are zeros: 8-dim blocks below hd_blocks are real.
  const int hd_blocks = static_cast<int>(p.head_dim / 8);

  // This thread's rows: gid and gid + 8 of each of the warp's m-tiles (row i = 2 * m-tile + r):
  // query token, head, position.
  constexpr int kMT = Smem::kMTiles, kR = 2 * Smem::kMTiles;
  int tok[kR], pos[kR];  // positions fit 31 bits (i32 lengths)
  int head[kR];
  bool live[kR];
  float slope[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const std::int64_t packed = row0 + (warp * kMT + i / 2) * 16 + gid + 8 * (i % 2);
    tok[i] = static_cast<int>(packed / group);
    head[i] = kv_head * group + static_cast<int>(packed % group);
    live[i] = tok[i] < n_q;
    pos[i] = static_cast<int>(first_pos + tok[i]);
    slope[i] = (live[i] && p.variant.alibi_slopes) ? p.variant.alibi_slopes[head[i]] : 0.0f;
  }
  // The warp's key limits: tiles outside [warp_lo, warp_hi) are skipped; tiles inside
  // [open_lo, open_hi) are seen whole by every live row of the warp and need no mask.
  std::int64_t warp_hi = -1, warp_lo = kv_len, open_hi = kv_len, open_lo = 0;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    if (!live[i]) continue;
    const std::int64_t hi = p.variant.causal ? min(kv_len, std::int64_t{pos[i]} + 1) : kv_len;
    const std::int64_t lo = p.variant.window_left >= 0 ? std::int64_t{pos[i]} - p.variant.window_left : std::int64_t{0};
    warp_hi = max(warp_hi, hi), warp_lo = min(warp_lo, lo);
    open_hi = min(open_hi, hi), open_lo = max(open_lo, lo);
  }
  for (int off = 16; off > 0; off /= 2) {
    warp_hi = max(warp_hi, __shfl_xor_sync(kAll, warp_hi, off));
    warp_lo = min(warp_lo, __shfl_xor_sync(kAll, warp_lo, off));
    open_hi = min(open_hi, __shfl_xor_sync(kAll, open_hi, off));
    open_lo = max(open_lo, __shfl_xor_sync(kAll, open_lo, off));
  }

  const float soft_cap = p.variant.soft_cap;
  const float k_scale = kFp8 ? p.kv.k_scale_of(kv_head) : 1.0f;
  const float v_scale = kFp8 ? p.kv.v_scale_of(kv_head) : 1.0f;
  // Per m-tile: fp8 caches scale each m-tile's q by its own power of two.
  float s_mul[kMT];
  // Q as A fragments ([k-step][row r][dims d, d+1, d+8, d+9], dead rows zero) into s_q; each
  // lane reads back only its own fragments.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    s_mul[mt] = p.variant.scale * k_scale * (kPlain ? kLog2e : 1.0f);
    float qf[kD / 16][2][4];
    visit_q_type(p.qo.q_dtype, [&](auto tag) {
      using Q = typename decltype(tag)::type;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = 2 * mt + r;
        const Q* q_row = reinterpret_cast<const Q*>(p.qo.q) + query_token(live[i] ? tok[i] : 0) * p.qo.q_token_stride +
                         static_cast<std::int64_t>(live[i] ? head[i] : 0) * p.qo.q_head_stride;
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          const int d = kk * 16 + tig * 2;
          const bool lo = live[i] && 2 * kk < hd_blocks, hi = live[i] && 2 * kk + 1 < hd_blocks;
          qf[kk][r][0] = lo ? to_float(q_row[d]) : 0.0f;
          qf[kk][r][1] = lo ? to_float(q_row[d + 1]) : 0.0f;
          qf[kk][r][2] = hi ? to_float(q_row[d + 8]) : 0.0f;
          qf[kk][r][3] = hi ? to_float(q_row[d + 9]) : 0.0f;
        }
      }
    });
    std::uint32_t qa[kD / 16][4];
    pack_q_fragments<T, kD, kFp8>(qf, s_mul[mt], qa);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      s_q[((warp * kMT + mt) * (kD / 16) + kk) * 32 + lane] = make_uint4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);
    }
  }
  auto q_fragment = [&](int mt, int kk, std::uint32_t (&a)[4]) {
    const uint4 v = s_q[((warp * kMT + mt) * (kD / 16) + kk) * 32 + lane];
    a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w;
  };

  float o[kMT][kD / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  float m[kR], l[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) m[i] = kNegInf, l[i] = 0.0f;

  const detail::KVTensorAccess& ka = p.kv.k;
  const detail::KVTensorAccess& va = p.kv.v;
  const int my_chunk = threadIdx.x % kChunks, my_row = threadIdx.x / kChunks;
  const bool chunk_live = my_chunk * kChunkElems < p.head_dim;  // else a chunk of zero dims, never read
  const KV* k_base = reinterpret_cast<const KV*>(ka.data) + ka.offset(0, kv_head, 0, my_chunk * kChunkElems);
  const KV* v_base = reinterpret_cast<const KV*>(va.data) + va.offset(0, kv_head, 0, my_chunk * kChunkElems);
  // The host checked that page and token strides fit 31 bits.
  const auto k_page_stride = static_cast<std::int32_t>(ka.page_stride), v_page_stride = static_cast<std::int32_t>(va.page_stride);
  const auto k_token_stride = static_cast<std::int32_t>(ka.token_stride), v_token_stride = static_cast<std::int32_t>(va.token_stride);
  auto stage_tile = [&](int stage, int is_v) { return s_pipe + stage * Smem::kStageBytes + is_v * Smem::kTileBytes; };
  auto chunk_ptr = [&](unsigned char* tile, int r) { return tile + r * Smem::kStageRowBytes + my_chunk * 16; };
  auto mma_tile = [&](int stage, int is_v) {
    if constexpr (kFp8) return s_wide + is_v * (Smem::kWideTileBytes / 2);
    else return reinterpret_cast<const T*>(stage_tile(stage, is_v));
  };
  // kVT: this thread copies run vt_chunk of dim rows vt_row + pass * kVtRowsPerPass; the dims'
  // offsets are dim * elem_stride from the head's base (V's dims are one chunk: chunk_len >=
  // head_dim, checked by the host).
  const int vt_chunk = threadIdx.x % Smem::kVtChunks, vt_row = threadIdx.x / Smem::kVtChunks;
  const KV* vt_base = reinterpret_cast<const KV*>(va.data) + va.offset(0, kv_head, 0, 0);
  auto vt_chunk_ptr = [&](unsigned char* tile, int d) { return tile + d * Smem::kVtStageRowBytes + vt_chunk * 16; };

  const std::int64_t P = p.kv.page_size;
  for (std::int64_t cp0 = t_begin / P; t_begin < t_end && cp0 * P < t_end; cp0 += kPageChunk) {
    const std::int64_t cp1 = min(cp0 + kPageChunk, ceil_div(t_end, P));
    __syncthreads();  // the previous chunk's ids and tiles are no longer read
    for (std::int64_t i = threadIdx.x; i < cp1 - cp0; i += blockDim.x) s_pages[i] = static_cast<std::int32_t>(pages.page(cp0 + i));
    __syncthreads();
    const std::int64_t c_begin = max(t_begin, cp0 * P), c_end = min(t_end, cp1 * P);
    // Tiles start at multiples of kKeys (cp0 * P is one); keys before c_begin are zeros, masked.
    const std::int64_t c_lo = c_begin - c_begin % kKeys;
    const std::int64_t n_tiles = ceil_div(c_end - c_lo, kKeys);
    const auto chunk_base = static_cast<std::uint32_t>(cp0 * P);
    // A tile's kKeys row offsets are computed once, by kKeys threads, into buffer j % 2 (a tile ahead
    // of its copies, behind a barrier the loop has anyway), instead of by each of the 16 (8 for
    // fp8) threads that copy a row: the page lookup was a third of the tile loop's instructions.
    auto stage_offsets = [&](std::int64_t j, int r) {
      const std::int64_t t = c_lo + j * kKeys + r;
      longlong2 off = make_longlong2(-1, -1);
      if (j < n_tiles && t >= c_begin && t < c_end) {
        // 32-bit offsets within a page, one 32 x 32 -> 64-bit multiply per page.
        const std::uint32_t local = static_cast<std::uint32_t>(t) - chunk_base;
        const std::uint32_t page_idx = prm.page_div.div(local);
        const std::int32_t page = s_pages[page_idx];
        const auto slot = static_cast<std::int32_t>(local - page_idx * static_cast<std::uint32_t>(P));
        off.x = static_cast<std::int64_t>(page) * k_page_stride + static_cast<std::int64_t>(slot) * k_token_stride;
        off.y = static_cast<std::int64_t>(page) * v_page_stride + static_cast<std::int64_t>(slot) * v_token_stride;
      }
      s_offsets[(j % 2) * kKeys + r] = off;
    };
    auto issue = [&](std::int64_t j) {
      if (j < n_tiles) {
        const int stage = static_cast<int>(j % kStages);
        const longlong2* offsets = s_offsets + (j % 2) * kKeys;
#pragma unroll
        for (int pass = 0; pass < Smem::kPasses; ++pass) {
          const int r = my_row + pass * Smem::kRowsPerPass;
          unsigned char* k_dst = chunk_ptr(stage_tile(stage, 0), r);
          unsigned char* v_dst = chunk_ptr(stage_tile(stage, 1), r);
          const longlong2 off = offsets[r];
          if (off.x >= 0 && chunk_live) {
            cp_async(k_dst, k_base + off.x, 16);
            if constexpr (!kVT) cp_async(v_dst, v_base + off.y, 16);
          } else {  // outside the keys or the dims: zeros, so 0-weight keys cannot turn into NaN
            *reinterpret_cast<uint4*>(k_dst) = make_uint4(0, 0, 0, 0);
            if constexpr (!kVT) *reinterpret_cast<uint4*>(v_dst) = make_uint4(0, 0, 0, 0);
          }
        }
        if constexpr (kVT) {
#pragma unroll
          for (int pass = 0; pass < Smem::kVtPasses; ++pass) {
            const int d = vt_row + pass * Smem::kVtRowsPerPass;
            unsigned char* dst = vt_chunk_ptr(stage_tile(stage, 1), d);
            const int key0 = vt_chunk * kChunkElems;
            const std::int64_t first = offsets[key0].y, last = offsets[key0 + kChunkElems - 1].y;
            const bool dim_live = d < p.head_dim;
            const std::int64_t dim_off = static_cast<std::int64_t>(d) * va.elem_stride;
            if (dim_live && prm.v_runs && first >= 0 && last >= 0) {  // one page's run of slots
              cp_async(dst, vt_base + first + dim_off, 16);
            } else {  // key by key; zeros outside the keys and the dims
              using Raw = std::conditional_t<sizeof(KV) == 1, std::uint8_t, std::uint16_t>;
              union {
                uint4 v;
                Raw e[kChunkElems];
              } run;
              run.v = make_uint4(0, 0, 0, 0);
              const Raw* src = reinterpret_cast<const Raw*>(vt_base);
#pragma unroll
              for (int e = 0; e < kChunkElems; ++e) {
                const std::int64_t off = offsets[key0 + e].y;
                if (dim_live && off >= 0) run.e[e] = src[off + dim_off];
              }
              *reinterpret_cast<uint4*>(dst) = run.v;
            }
          }
        }
      }
      cp_async_commit();
    };

    if (threadIdx.x < 2 * kKeys) stage_offsets(threadIdx.x / kKeys, static_cast<int>(threadIdx.x % kKeys));
    __syncthreads();
    issue(0);
    for (std::int64_t j = 0; j < n_tiles; ++j) {
      issue(j + 1);
      cp_async_wait<1>();  // this thread's copies of tile j have landed
      const int stage = static_cast<int>(j % kStages);
      if constexpr (kFp8) {
#pragma unroll
        for (int pass = 0; pass < Smem::kPasses; ++pass) {
          const int r = my_row + pass * Smem::kRowsPerPass;
#pragma unroll
          for (int is_v = 0; is_v < (kVT ? 1 : 2); ++is_v) {
            const uint4 raw = *reinterpret_cast<const uint4*>(chunk_ptr(stage_tile(stage, is_v), r));
            uint4* dst = reinterpret_cast<uint4*>(s_wide + is_v * (Smem::kWideTileBytes / 2) + r * kRowElems + my_chunk * 16);
            widen_fp8x16_to_f16<KV>(raw, dst[0], dst[1]);
          }
        }
        if constexpr (kVT) {
#pragma unroll
          for (int pass = 0; pass < Smem::kVtPasses; ++pass) {
            const int d = vt_row + pass * Smem::kVtRowsPerPass;
            const uint4 raw = *reinterpret_cast<const uint4*>(vt_chunk_ptr(stage_tile(stage, 1), d));
            uint4* dst = reinterpret_cast<uint4*>(s_wide + Smem::kWideTileBytes / 2 + d * Smem::kVtRowElems + vt_chunk * 16);
            widen_fp8x16_to_f16<KV>(raw, dst[0], dst[1]);
          }
        }
      }
      __syncthreads();  // tile j (widened) is visible to every warp; offsets j + 1 were read
      if (threadIdx.x < kKeys) stage_offsets(j + 2, static_cast<int>(threadIdx.x));
      const std::int64_t t0 = c_lo + j * kKeys;
      if (t0 < warp_hi && t0 + kKeys > warp_lo) {  // some row of this warp sees a key of the tile
        // The tile in sub-tiles of kSub keys, each its own online-softmax step: half the logit
        // registers of a whole tile, which two m-tiles of outputs leave no room for.
#pragma unroll 1
        for (int sub = 0; sub < kKeys / kSub; ++sub) {
        const T* k_tile = mma_tile(stage, 0) + sub * kSub * kRowElems;
        const T* v_tile = mma_tile(stage, 1) + sub * kSub * (kVT ? 1 : kRowElems);  // kVT: a column offset
        const std::int64_t ts = t0 + sub * kSub;  // the sub-tile's first key
        float sc[kMT][kSub / 8][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0.0f;
        // S = Q K^T: each K fragment feeds both m-tiles.
#pragma unroll
        for (int kk = 0; kk < kD / 16; kk += 2) {
          std::uint32_t qa[kMT][2][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) q_fragment(mt, kk, qa[mt][0]), q_fragment(mt, kk + 1, qa[mt][1]);
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) {
            std::uint32_t b[4];
            ldmatrix_x4<false>(b, k_tile + (nt * 8 + (lane & 7)) * kRowElems + kk * 16 + (lane >> 3) * 8);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              mma16816<T>(sc[mt][nt], qa[mt][0], b[0], b[1]);
              mma16816<T>(sc[mt][nt], qa[mt][1], b[2], b[3]);
            }
          }
        }
        // Rows past the sequence's queries stay unmasked inside the open range: their results
        // are never written.
        const bool open = ts >= max(c_begin, open_lo) && ts + kSub <= min(c_end, open_hi);
        const int c_begin32 = static_cast<int>(c_begin), c_end32 = static_cast<int>(c_end);
        float rmax[kR];
#pragma unroll
        for (int i = 0; i < kR; ++i) rmax[i] = kNegInf;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = 2 * mt + (e >> 1);
              const int dt = nt * 8 + tig * 2 + (e & 1);  // key ts + dt
              // Plain logits stay unscaled here: the scale folds into the exponent's FFMA below.
              float x = sc[mt][nt][e];
              if constexpr (!kPlain) {
                x *= s_mul[mt];
                if (soft_cap > 0.0f) x = soft_cap * tanhf(x / soft_cap);
                x = (x + slope[i] * static_cast<float>(static_cast<int>(ts) + dt - pos[i])) * kLog2e;
              }
              if (!open) {  // positions fit 31 bits
                const int t = static_cast<int>(ts) + dt, pos32 = pos[i];
                bool ok = live[i] && t >= c_begin32 && t < c_end32;
                if (p.variant.causal) ok = ok && t <= pos32;
                if (p.variant.window_left >= 0) ok = ok && t >= pos32 - p.variant.window_left;
                x = ok ? x : kNegInf;
              }
              sc[mt][nt][e] = x;
              rmax[i] = fmaxf(rmax[i], x);
            }
          }
        }
        float corr[kR], m_sub[kR];
        bool rescale = false;
#pragma unroll
        for (int i = 0; i < kR; ++i) {
          const float p_mul = kPlain ? s_mul[i / 2] : 1.0f;  // what still multiplies the stored logits
          rmax[i] = fmaxf(rmax[i], __shfl_xor_sync(kAll, rmax[i], 1));
          rmax[i] = fmaxf(rmax[i], __shfl_xor_sync(kAll, rmax[i], 2));
          const float m_new = fmaxf(m[i], rmax[i] * p_mul);  // s_mul > 0 keeps the order
          corr[i] = m_new == kNegInf ? 1.0f : exp2f(m[i] - m_new);
          rescale = rescale || corr[i] != 1.0f;
          m[i] = m_new;
          l[i] *= corr[i];
          // A row with no key yet has m = -inf and only -inf logits: 2^(-inf - 0) = 0.
          m_sub[i] = m[i] == kNegInf ? 0.0f : m[i];
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const float p_mul = kPlain ? s_mul[mt] : 1.0f;
#pragma unroll
          for (int nt = 0; nt < kSub / 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = 2 * mt + (e >> 1);
              sc[mt][nt][e] = fast_exp2(fmaf(sc[mt][nt][e], p_mul, -m_sub[i]));
              l[i] += sc[mt][nt][e];
            }
          }
        }
        if (__any_sync(kAll, rescale)) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
            for (int n = 0; n < kD / 8; ++n) {
              o[mt][n][0] *= corr[2 * mt], o[mt][n][1] *= corr[2 * mt];
              o[mt][n][2] *= corr[2 * mt + 1], o[mt][n][3] *= corr[2 * mt + 1];
            }
          }
        }
        // O += P V: each V fragment feeds both m-tiles.
#pragma unroll
        for (int ks = 0; ks < kSub / 16; ++ks) {  // 16 keys per k-step of P V
          std::uint32_t pa[kMT][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            pa[mt][0] = pack2<T>(sc[mt][2 * ks][0], sc[mt][2 * ks][1]);
            pa[mt][1] = pack2<T>(sc[mt][2 * ks][2], sc[mt][2 * ks][3]);
            pa[mt][2] = pack2<T>(sc[mt][2 * ks + 1][0], sc[mt][2 * ks + 1][1]);
            pa[mt][3] = pack2<T>(sc[mt][2 * ks + 1][2], sc[mt][2 * ks + 1][3]);
          }
#pragma unroll
          for (int n = 0; n < kD / 8; n += 2) {
            std::uint32_t b[4];  // dims n * 8.. and (n + 1) * 8.., keys ks * 16 + 0..7 and 8..15
            if constexpr (kVT) {
              ldmatrix_x4<false>(b, v_tile + (n * 8 + (lane & 7) + ((lane >> 4) & 1) * 8) * Smem::kVtRowElems +
                                        ks * 16 + ((lane >> 3) & 1) * 8);
            } else {
              ldmatrix_x4<true>(b, v_tile + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kRowElems + n * 8 + (lane >> 4) * 8);
            }
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              mma16816<T>(o[mt][n], pa[mt], b[0], b[1]);
              mma16816<T>(o[mt][n + 1], pa[mt], b[2], b[3]);
            }
          }
        }
              }
      }
      __syncthreads();  // every warp is done with the stage the next issue refills
    }
    cp_async_wait<0>();
  }

  // Row sums were accumulated per lane: complete them across the quad.
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    l[i] += __shfl_xor_sync(kAll, l[i], 1);
    l[i] += __shfl_xor_sync(kAll, l[i], 2);
  }
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
  std::byte* out = p.qo.out + split * prm.out_split_stride * out_size;
  float* lse = p.qo.lse ? p.qo.lse + split * prm.lse_split_stride : nullptr;
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    if (!live[i]) continue;
    float M = m[i], L = l[i];
    const float scale_o = fold_sink(p, head[i], M, L);
    const float inv = L > 0.0f ? scale_o * v_scale / L : 0.0f;
    const std::int64_t q_tok = query_token(tok[i]);
    std::byte* o_row = out + (q_tok * p.qo.out_token_stride + head[i] * p.qo.out_head_stride) * out_size;
    const int mt = i / 2, r = i % 2;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) {
      if (n >= hd_blocks) break;
      store_one(o_row, p.qo.out_dtype, n * 8 + tig * 2, o[mt][n][2 * r] * inv);
      store_one(o_row, p.qo.out_dtype, n * 8 + tig * 2 + 1, o[mt][n][2 * r + 1] * inv);
    }
    if (tig == 0 && lse) lse[q_tok * p.qo.lse_token_stride + head[i] * p.qo.lse_head_stride] = natural_lse(M, L);
  }
}

// Launches paged_prefill_mma_kernel<KV, T, prefill_kernel_dims(head_dim)> over `grid`.
// Instantiated in instantiations/prefill_mma_*.cu.
template <class KV, class T>
void launch_paged_prefill_mma(const PrefillKernelParams& prm, int head_dim, dim3 grid, cudaStream_t stream) {
  auto launch = [&](auto d_c, auto plain_c, auto vt_c) {
    constexpr int kD = decltype(d_c)::value;
    constexpr bool kVT = decltype(vt_c)::value;
    constexpr int kBytes = PrefillSmem<KV, kD, kVT>::kBytes;
    auto kernel = paged_prefill_mma_kernel<KV, T, kD, decltype(plain_c)::value, kVT>;
    if (allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), kBytes) != cudaSuccess) {
      return;  // reported by the caller's launch check
    }
    kernel<<<grid, kPrefillThreads, kBytes, stream>>>(prm);
  };
  const bool plain = prm.p.variant.soft_cap == 0.0f && prm.p.variant.alibi_slopes == nullptr;
  auto with_d = [&](auto plain_c, auto vt_c) {
    with_prefill_kernel_dims(head_dim, [&](auto d_c) { launch(d_c, plain_c, vt_c); });
  };
  // Transposed V tiles come only with the general logit path (a plain problem runs on it
  // exactly: no soft-cap, zero slopes), which halves their instantiations.
  if (prm.v_transposed) with_d(std::false_type{}, std::true_type{});
  else if (plain) with_d(std::true_type{}, std::false_type{});
  else with_d(std::false_type{}, std::false_type{});
}

}  // namespace pagedattn::cuda
