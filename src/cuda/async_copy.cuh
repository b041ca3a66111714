// Internal (CUDA, sm_90): Hopper's asynchronous copies into shared memory and what paces them:
// the 128-byte swizzle that TMA writes and wgmma / ldmatrix read, phase-counting barriers
// (mbarrier), tensor copies (TMA) of boxes described by a CUtensorMap, and the proxy fence.
// Used by kernels compiled for sm_90 / sm_90a only.
//
// The 128-byte swizzle: a tile of rows of 16-bit elements is stored as column blocks of 64
// elements (128 bytes per row), block b of an R-row tile at b * R * 128 bytes, row r of a block
// at r * 128, and 16-byte chunk c of a row at chunk position c ^ (r % 8). Every tile starts on a
// 1024-byte boundary (8 rows: one swizzle period).
#pragma once

#include <cstdint>

namespace pagedattn::cuda::sm90 {

// Byte offset of 16-byte chunk `chunk` (of 8 elements) of row `row` in a swizzled tile of
// `rows` rows.
__device__ __forceinline__ std::uint32_t swizzled_offset(int row, int chunk, int rows) {
  return static_cast<std::uint32_t>((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Generic-proxy writes to shared memory (ordinary stores) made visible to the async proxy:
// wgmma reads and tensor copies that later overwrite them.
__device__ __forceinline__ void fence_shared_for_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- mbarrier: phase-counting barriers in shared memory -------------------------------------

__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals) : "memory");
}
// Makes this thread's mbarrier.init visible to the async proxy (tensor copies completing on the
// barrier) and to the other threads after the next barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// `count` arrivals in one operation (sm_90).
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
// One arrival once all of this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void mbarrier_arrive_on_copies(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// One arrival that also expects `bytes` more to land by tensor copies (complete_tx) before the
// phase can complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes) : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, unsigned parity) {
  const std::uint32_t address = smem_address(bar);
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (!done);
}

// 16 bytes global -> shared, or 16 zero bytes when !valid (the source is then not read).
__device__ __forceinline__ void cp_async_16_or_zeros(std::uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// ---- TMA: tensor copies described by a CUtensorMap -------------------------------------------

// The box at coordinates (c0, c1, c2, c3), innermost first, of the 4-d tensor `map` (a kernel
// parameter: __grid_constant__) into shared memory at dst; its bytes count against `bar`.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const void* map, int c0, int c1, int c2, int c3,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      ::"r"(dst), "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_address(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(std::uint32_t dst, const void* map, int c0, int c1, int c2, int c3, int c4,
                                            std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n"
      ::"r"(dst), "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(smem_address(bar))
      : "memory");
}

// An L2 policy under which the lines a copy brings in are the first to go when L2 needs room:
// for K/V rows that one kernel reads once. A constant: the compiler folds it into the copies.
__device__ __forceinline__ std::uint64_t l2_evict_first_policy() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// The 4-d and 5-d loads under an L2 cache policy.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const void* map, int c0, int c1, int c2, int c3,
                                            std::uint64_t* bar, std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n"
      ::"r"(dst), "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_address(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(std::uint32_t dst, const void* map, int c0, int c1, int c2, int c3, int c4,
                                            std::uint64_t* bar, std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4, %5, %6}], [%7], %8;\n"
      ::"r"(dst), "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(smem_address(bar)), "l"(policy)
      : "memory");
}

// Asks L2 for a 5-d (4-d) box without copying it anywhere (no barrier, no shared memory): the DRAM
// starts on tiles the pipeline has no stage for yet.
__device__ __forceinline__ void tma_prefetch_5d(const void* map, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.prefetch.tensor.5d.L2.global.tile [%0, {%1, %2, %3, %4, %5}];\n"
               ::"l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
__device__ __forceinline__ void tma_prefetch_4d(const void* map, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n"
               ::"l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

}  // namespace pagedattn::cuda::sm90
