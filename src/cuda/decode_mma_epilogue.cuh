// Internal (CUDA): the ends of the tensor-core decode kernel's CTAs (decode_mma_kernel.cuh): its
// warps' softmax states folded into the CTA's result, then written as the output or as the
// split's partial state. Smem is the kernel's MmaDecodeSmem (its merge region's shape).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/decode_kernel.cuh"
#include "cuda/kv_vec.cuh"
#include "cuda/mma_fragments.cuh"

namespace pagedattn::cuda {

// The end of a kKeyRows CTA: every warp leaves its heads' rows of O (unnormalised), maxima and
// sums in shared memory (`s_region`, free once all tiles are consumed); one thread per head folds
// the warps' states (and the sink) into a weight per warp; then all threads write the output,
// or the split's f32 partial state, four dims at a time.
template <class Smem, class T, int kD, bool kPadded>
__device__ __forceinline__ void write_key_rows_result(const DecodeKernelParams& prm, const DecodeCta& cta,
                                                      const float (&o)[kD / 16][4], const float (&m)[2],
                                                      float (&l)[2], int head_dim, float v_scale,
                                                      unsigned char* s_region) {
  constexpr int kWarps = Smem::kWarps, kHeads = Smem::kKeyRowHeads, kRow = Smem::kOutRowFloats;
  constexpr float kNegInf = detail::kNegInf;
  const detail::AttentionProblem& p = prm.p;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int c = 0; c < 2; ++c) {  // the lanes' row sums, completed across the 8 gid lanes
    for (int off = 4; off < 32; off *= 2) l[c] += __shfl_xor_sync(0xffffffffu, l[c], off);
  }
  auto* s_out = reinterpret_cast<float*>(s_region);            // [warp][head][kRow]
  float* s_m = s_out + kWarps * kHeads * kRow;                 // [warp][head]
  float* s_l = s_m + kWarps * kHeads;
  float* s_w = s_l + kWarps * kHeads;                          // the fold's weight of (warp, head)
  __syncthreads();  // every warp's tiles are consumed: the stage buffers are free
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int head = 2 * tig + c;
    if (head >= cta.n_g) continue;
    float* row = s_out + (warp * kHeads + head) * kRow;
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) {
      if constexpr (Smem::kVInRegs) {  // rows gid, gid + 8 of m-tile n are dims 16 gid + 2 n, + 1
        *reinterpret_cast<float2*>(row + 16 * gid + 2 * n) = make_float2(o[n][c], o[n][2 + c]);
      } else {
        row[n * 16 + gid] = o[n][c], row[n * 16 + gid + 8] = o[n][2 + c];
      }
    }
    if (gid == 0) s_m[warp * kHeads + head] = m[c], s_l[warp * kHeads + head] = l[c];
  }
  __syncthreads();
  const std::int64_t h0 = static_cast<std::int64_t>(cta.kv_head) * cta.group + cta.g0;
  if (threadIdx.x < cta.n_g) {
    const int head = threadIdx.x;
    const std::int64_t h = h0 + head;
    float M = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, s_m[w * kHeads + head]);
    float f[kWarps], L = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      f[w] = M == kNegInf ? 0.0f : fast_exp2(s_m[w * kHeads + head] - M);
      L += f[w] * s_l[w * kHeads + head];
    }
    const float inv = finish_head_state(prm, cta, h, M, L, v_scale, true);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s_w[w * kHeads + head] = f[w] * inv;
  }
  __syncthreads();
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
  constexpr DType kT = std::is_same_v<T, __nv_bfloat16> ? DType::kBF16 : DType::kF16;
  for (int i = threadIdx.x; i < cta.n_g * (kD / 4); i += 32 * kWarps) {
    const int head = i / (kD / 4), d = (i % (kD / 4)) * 4;
    if (kPadded && d >= head_dim) continue;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = s_w[w * kHeads + head];
      const float4 v = *reinterpret_cast<const float4*>(s_out + (w * kHeads + head) * kRow + d);
      acc.x = fmaf(wt, v.x, acc.x), acc.y = fmaf(wt, v.y, acc.y), acc.z = fmaf(wt, v.z, acc.z), acc.w = fmaf(wt, v.w, acc.w);
    }
    const std::int64_t h = h0 + head;
    if (cta.n_splits > 1) {
      *reinterpret_cast<float4*>(prm.part_o + split_state_index(prm, cta, h) * head_dim + d) = acc;
      continue;
    }
    std::byte* o_row = p.qo.out + (cta.s * p.qo.out_token_stride + h * p.qo.out_head_stride) * out_size;
    if (p.qo.out_dtype == kT && reinterpret_cast<std::uintptr_t>(o_row) % 8 == 0) {
      *reinterpret_cast<uint2*>(o_row + d * 2) = make_uint2(pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w));
    } else {
      store_one(o_row, p.qo.out_dtype, d, acc.x);
      store_one(o_row, p.qo.out_dtype, d + 1, acc.y);
      store_one(o_row, p.qo.out_dtype, d + 2, acc.z);
      store_one(o_row, p.qo.out_dtype, d + 3, acc.w);
    }
  }
}

// The end of an untransposed CTA: the warps' states meet in warp 0's registers. Warps 1.. leave
// their live rows in shared memory (`s_region`, free once all tiles are consumed) and warp 0
// folds them in and writes the result from its fragments (4-byte pairs). (The generic
// write_cta_result walked every (head, dim) of the tile through shared memory with a division
// per element: ~3 us of every CTA's critical path; docs/perf-notes.md v23.)
template <class Smem, class T, int kD>
__device__ __forceinline__ void write_head_rows_result(const DecodeKernelParams& prm, const DecodeCta& cta,
                                                       float (&o)[kD / 8][4], const float (&m)[2], float (&l)[2],
                                                       int head_dim, float v_scale, unsigned char* s_region) {
  constexpr int kWarps = Smem::kWarps;
  constexpr float kNegInf = detail::kNegInf;
  const detail::AttentionProblem& p = prm.p;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
  const int kv_head = cta.kv_head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {  // row sums were accumulated per lane: complete them across the quad
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const bool live[2] = {gid < cta.n_g, gid + 8 < cta.n_g};
  // Every warp's tiles are consumed: the stage buffers are free.
  __syncthreads();
  auto* s_o = reinterpret_cast<float*>(s_region);  // [warp - 1][row][kMergeRowFloats]
  float* s_ml = s_o + (kWarps - 1) * 16 * Smem::kMergeRowFloats;  // [warp - 1][row][2]
  if (warp > 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!live[r]) continue;
      const int row = (warp - 1) * 16 + gid + 8 * r;
      if (tig == 0) s_ml[row * 2] = m[r], s_ml[row * 2 + 1] = l[r];
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        *reinterpret_cast<float2*>(s_o + row * Smem::kMergeRowFloats + n * 8 + tig * 2) =
            make_float2(o[n][2 * r], o[n][2 * r + 1]);
      }
    }
  }
  __syncthreads();
  if (warp > 0) return;
  const auto out_size = static_cast<std::int64_t>(dtype_size(p.qo.out_dtype));
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!live[r]) continue;
    const int row = gid + 8 * r;
    float M = m[r];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) M = fmaxf(M, s_ml[((w - 1) * 16 + row) * 2]);
    const float own = M == kNegInf ? 0.0f : fast_exp2(m[r] - M);
    float L = l[r] * own;
#pragma unroll
    for (int n = 0; n < kD / 8; ++n) o[n][2 * r] *= own, o[n][2 * r + 1] *= own;
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      const int wrow = (w - 1) * 16 + row;
      const float f = M == kNegInf ? 0.0f : fast_exp2(s_ml[wrow * 2] - M);
      L += f * s_ml[wrow * 2 + 1];
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        const float2 v = *reinterpret_cast<const float2*>(s_o + wrow * Smem::kMergeRowFloats + n * 8 + tig * 2);
        o[n][2 * r] = fmaf(f, v.x, o[n][2 * r]);
        o[n][2 * r + 1] = fmaf(f, v.y, o[n][2 * r + 1]);
      }
    }
    const std::int64_t h = static_cast<std::int64_t>(kv_head) * cta.group + cta.g0 + row;
    const float inv = finish_head_state(prm, cta, h, M, L, v_scale, tig == 0);
    if (cta.n_splits > 1) {  // the split's partial state, normalised, for the merge launch
      float* o_part = prm.part_o + split_state_index(prm, cta, h) * head_dim;
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        if (n * 8 >= head_dim) break;
        *reinterpret_cast<float2*>(o_part + n * 8 + tig * 2) = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      }
      continue;
    }
    std::byte* o_row = p.qo.out + (cta.s * p.qo.out_token_stride + h * p.qo.out_head_stride) * out_size;
    constexpr DType kT = std::is_same_v<T, __nv_bfloat16> ? DType::kBF16 : DType::kF16;
    if (p.qo.out_dtype == kT && reinterpret_cast<std::uintptr_t>(o_row) % 4 == 0) {
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        if (n * 8 >= head_dim) break;
        *reinterpret_cast<std::uint32_t*>(o_row + (n * 8 + tig * 2) * 2) =
            pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      }
    } else {
#pragma unroll
      for (int n = 0; n < kD / 8; ++n) {
        if (n * 8 >= head_dim) break;
        store_one(o_row, p.qo.out_dtype, n * 8 + tig * 2, o[n][2 * r] * inv);
        store_one(o_row, p.qo.out_dtype, n * 8 + tig * 2 + 1, o[n][2 * r + 1] * inv);
      }
    }
  }
}

}  // namespace pagedattn::cuda
