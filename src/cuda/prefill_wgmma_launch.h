// Internal: the Hopper (sm_90a) prefill kernel's shape and launcher (defined in prefill_wgmma_kernel.cuh,
// instantiated in sm90a/prefill_wgmma_*.cu, which only the sm_90a target compiles).
#pragma once

#include <cuda_runtime.h>

namespace pagedattn::cuda {
struct PrefillKernelParams;

// The kernel's tiles and resources, for the host-side planners too; kHeadDims: 128, 64 for head
// dims up to 64, or 256 for those past 128 (smaller ones run zero-padded on the next). At 256,
// tiles of 64 keys in two stages: O's 64 x 256 accumulators take 128 of a consumer thread's
// registers and Q 64 KB of shared memory. kFp8: the cache holds fp8, which the producer copies
// into raw stages (one byte per element) and widens into the f16 ring: the raw stages take the
// room of the ring's third stage at head_dim 128 (one raw stage at 256).
template <int kHeadDims, bool kFp8 = false>
struct WgmmaPrefillShapeOf {
  static constexpr int kThreads = 384;  // producer + two consumer warpgroups
  static constexpr int kRows = 128;     // packed query rows per CTA, 64 per consumer
  static constexpr int kD = kHeadDims;
  static constexpr int kKeys = kD > 128 ? 64 : 128;  // keys per K/V tile
  static constexpr int kHalves = kD / 64;  // 64-dim blocks of a row (128 swizzled bytes each)
  static constexpr int kStages = kD > 128 || (kFp8 && kD == 128) ? 2 : 3;
  static constexpr int kWarpRows = kKeys / 4;  // tile rows each producer warp gathers
  static constexpr int kOCols = kD < 128 ? kD : 128;  // O columns per P V wgmma (n64 or n128)
  static constexpr int kOBlocks = kD / kOCols;
  static constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static constexpr int kQBytes = kRows * kD * 2;
  static constexpr int kTileBytes = kKeys * kD * 2;
  // fp8: raw K and V tiles (kKeys rows of kD bytes each), copied kRawStages tiles ahead.
  static constexpr int kRawStages = !kFp8 ? 0 : kD > 128 ? 1 : 2;
  static constexpr int kRawTileBytes = kKeys * kD;
  // Page-major tiles (pages of kPageMajorSlots keys, one TMA box each): a page is its two
  // groups of 8 slots one after the other, each group its two 64-dim halves of 8 rows of 128
  // bytes, so that the 8-key groups of a tile lie kSlotGroupBytes apart throughout.
  static constexpr int kPageMajorSlots = 16;
  static constexpr int kGroupHalfBytes = 8 * 128;
  static constexpr int kSlotGroupBytes = 2 * kGroupHalfBytes;
  static constexpr int kPageMajorBytes = 2 * kSlotGroupBytes;
  static constexpr int kOffsetBytes = kKeys * 8;  // the producer's rows of a tile (K, V offsets)
  // full K, full V, empty (V, and K too without fp8) per stage; fp8 releases K apart (empty K)
  // and has a "landed" and a "read" barrier per raw stage.
  static constexpr int kBarrierBytes = ((kFp8 ? 4 : 3) * kStages + 2 * kRawStages) * 8;
  static constexpr int kQMaxBytes = kFp8 ? 8 : 0;  // fp8: each consumer's largest |q| (f32 bits)
  // + 1024: the tiles are aligned to the swizzle period inside the dynamic allocation.
  static constexpr int kBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + 2 * kRawStages * kRawTileBytes + kOffsetBytes +
                                kBarrierBytes + kQMaxBytes;
  static_assert(kBytes <= 227 * 1024, "fits one SM's shared memory");
  static constexpr int kProducerRegs = kD > 128 ? 40 : 56, kConsumerRegs = kD > 128 ? 232 : 224;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register budgets fit the SM");
};
using WgmmaPrefillShape = WgmmaPrefillShapeOf<128>;

// KV: the cache's element, __nv_bfloat16 or __half (q's dtype too; head_dim a multiple of 8 up to
// 256), or Fp8E4M3 / Fp8E5M2 (widened to f16; q bf16 or f16; head_dim a multiple of 16, K and V
// rows of dims).
template <class KV>
void launch_paged_prefill_wgmma(const PrefillKernelParams& prm, dim3 grid, cudaStream_t stream);
}  // namespace pagedattn::cuda
