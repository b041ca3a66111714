// Internal: the Hopper (sm_90a) prefill kernel's shape and launcher (defined in prefill_wgmma_kernel.cuh,
// instantiated in sm90a/prefill_wgmma_*.cu, which only the sm_90a target compiles).
#pragma once

#include <cuda_runtime.h>

namespace pagedattn::cuda {
struct PrefillKernelParams;

// The kernel's tiles and resources, for the host-side planners too; kHeadDims: 128, 64 for head
// dims up to 64, or 256 for those past 128 (smaller ones run zero-padded on the next). At 256,
// tiles of 64 keys in two stages: O's 64 x 256 accumulators take 128 of a consumer thread's
// registers and Q 64 KB of shared memory.
template <int kHeadDims>
struct WgmmaPrefillShapeOf {
  static constexpr int kThreads = 384;  // producer + two consumer warpgroups
  static constexpr int kRows = 128;     // packed query rows per CTA, 64 per consumer
  static constexpr int kD = kHeadDims;
  static constexpr int kKeys = kD > 128 ? 64 : 128;  // keys per K/V tile
  static constexpr int kHalves = kD / 64;  // 64-dim blocks of a row (128 swizzled bytes each)
  static constexpr int kStages = kD > 128 ? 2 : 3;
  static constexpr int kWarpRows = kKeys / 4;  // tile rows each producer warp gathers
  static constexpr int kOCols = kD < 128 ? kD : 128;  // O columns per P V wgmma (n64 or n128)
  static constexpr int kOBlocks = kD / kOCols;
  static constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static constexpr int kQBytes = kRows * kD * 2;
  static constexpr int kTileBytes = kKeys * kD * 2;
  // Page-major tiles (pages of kPageMajorSlots keys, one TMA box each): a page is its two
  // groups of 8 slots one after the other, each group its two 64-dim halves of 8 rows of 128
  // bytes, so that the 8-key groups of a tile lie kSlotGroupBytes apart throughout.
  static constexpr int kPageMajorSlots = 16;
  static constexpr int kGroupHalfBytes = 8 * 128;
  static constexpr int kSlotGroupBytes = 2 * kGroupHalfBytes;
  static constexpr int kPageMajorBytes = 2 * kSlotGroupBytes;
  static constexpr int kOffsetBytes = kKeys * 8;  // the producer's rows of a tile (K, V offsets)
  static constexpr int kBarrierBytes = 3 * kStages * 8;
  // + 1024: the tiles are aligned to the swizzle period inside the dynamic allocation.
  static constexpr int kBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kOffsetBytes + kBarrierBytes;
  static_assert(kBytes <= 227 * 1024, "fits one SM's shared memory");
  static constexpr int kProducerRegs = kD > 128 ? 40 : 56, kConsumerRegs = kD > 128 ? 232 : 224;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register budgets fit the SM");
};
using WgmmaPrefillShape = WgmmaPrefillShapeOf<128>;

// T: __nv_bfloat16 or __half (q and cache); head_dim a multiple of 8 up to 256.
template <class T>
void launch_paged_prefill_wgmma(const PrefillKernelParams& prm, dim3 grid, cudaStream_t stream);
}  // namespace pagedattn::cuda
