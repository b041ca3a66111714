// Paged prefill on CUDA: which problems the tensor-core kernels cover, which one runs, its launch.
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/env_switch.h"
#include "cuda/cuda_check.h"
#include "cuda/kv_rows.h"
#include "cuda/page_tensor_map.h"
#include "cuda/prefill.h"
#include "cuda/prefill_mma_kernel.cuh"
#include "cuda/prefill_mma_launch.h"
#include "cuda/prefill_wgmma_launch.h"
#include "cuda/sm_count.h"

namespace pagedattn::cuda {

std::string prefill_unsupported(const detail::AttentionProblem& p) {
  const DType kv = p.kv.dtype, q = p.qo.q_dtype;
  const bool q16 = q == DType::kBF16 || q == DType::kF16;
  if (!q16 || !(kv == q || is_fp8(kv))) {
    return std::string("prefill on CUDA needs a bf16 or f16 q with a cache of q's dtype or of fp8, got q ") +
           std::string(to_string(q)) + " and a " + std::string(to_string(kv)) + " cache";
  }
  const std::int64_t chunk = elements_per_copy(kv);
  if (p.head_dim % chunk != 0 || p.head_dim > 256) {
    return "prefill on CUDA supports head_dim a multiple of " + std::to_string(chunk) + " up to 256" +
           (is_fp8(kv) ? std::string(" with a fp8 cache") : std::string()) + ", got " + std::to_string(p.head_dim);
  }
  if (!rows_vectorisable(p.kv.k, kv, chunk)) {
    return "prefill on CUDA needs K rows in 16-byte aligned runs of dims (NHD, HND or vLLM's split K)";
  }
  if (p.kv.v.chunk_len < p.head_dim) return "prefill on CUDA needs V's dims strided evenly";
  constexpr std::int64_t k31 = std::int64_t{1} << 31;
  if (p.kv.k.page_stride >= k31 || p.kv.v.page_stride >= k31 || p.kv.k.token_stride >= k31 ||
      p.kv.v.token_stride >= k31) {
    return "prefill on CUDA needs page and token strides below 2^31 elements";
  }
  if (p.num_seqs > detail::kCudaMaxGridYZ) {
    return "prefill on CUDA supports at most 65535 sequences per call, got " + std::to_string(p.num_seqs);
  }
  return {};
}

namespace {

// A kernel shape's rows, key tile and shared memory (WgmmaPrefillShapeOf or PrefillSmem).
template <class Shape>
PrefillGeometry geometry_of(bool hopper) {
  PrefillGeometry g;
  g.hopper = hopper;
  g.rows_per_cta = Shape::kRows;
  g.tile_keys = Shape::kKeys;
  g.cta_smem_bytes = Shape::kBytes;
  return g;
}

// The Hopper kernel's shape for a head_dim and a 16-bit or fp8 cache.
PrefillGeometry wgmma_shape(std::int64_t head_dim, bool fp8) {
  return with_prefill_kernel_dims(head_dim, [fp8](auto d_c) {
    constexpr int kD = decltype(d_c)::value;
    return fp8 ? geometry_of<WgmmaPrefillShapeOf<kD, true>>(true) : geometry_of<WgmmaPrefillShapeOf<kD>>(true);
  });
}

// V rows as 16-byte runs of dims (NHD, HND); otherwise the kernels take V transposed.
bool v_rows(const detail::AttentionProblem& p) {
  return rows_vectorisable(p.kv.v, p.kv.dtype, elements_per_copy(p.kv.dtype));
}

// The Hopper kernel's tiles from this cache: K and V rows of dims (NHD, HND), or vLLM's split
// layout (K in chunks of 8 dims, V transposed in runs of 8 slots: the kernel's kVT) of a 16-bit
// cache (fp8 rows are widened as they are gathered; transposed fp8 V is not).
bool hopper_tiles(const detail::AttentionProblem& p) {
  if (p.kv.k.dim_contiguous(p.head_dim) && v_rows(p)) return true;
  if (is_fp8(p.kv.dtype)) return false;
  const detail::KVTensorAccess& k = p.kv.k;
  return !v_rows(p) && v_runs_vectorisable(p.kv) && k.elem_stride == 1 && k.chunk_len == 8 && k.chunk_stride % 8 == 0 &&
         k.token_stride % 8 == 0;
}

bool hopper_kernel_fits(const detail::AttentionProblem& p, int device) {
#if defined(PAGEDATTN_WITH_SM90A)
  if (detail::env_value("PAGEDATTN_PREFILL_KERNEL") == "mma") return false;
  const bool q_rows_aligned = reinterpret_cast<std::uintptr_t>(p.qo.q) % 16 == 0 && p.qo.q_token_stride % 8 == 0 &&
                              p.qo.q_head_stride % 8 == 0;
  // The producer keeps each row's offset in units of 8 elements (16 bytes, fp8: 8) in 32 bits.
  auto offsets_fit = [&](const detail::KVTensorAccess& t) {
    const std::int64_t last = (p.kv.num_pages - 1) * t.page_stride + (p.kv.num_kv_heads - 1) * t.head_stride +
                              (p.kv.page_size - 1) * t.token_stride;
    return last / 8 < std::int64_t{0xffffffff};
  };
  return (p.kv.dtype == p.qo.q_dtype || is_fp8(p.kv.dtype)) && p.head_dim <= 256 && p.head_dim % 8 == 0 &&
         hopper_tiles(p) && q_rows_aligned && offsets_fit(p.kv.k) && offsets_fit(p.kv.v) && is_sm90(device);
#else
  (void)p, (void)device;
  return false;
#endif
}

// The Hopper kernel's TMA page boxes: pages that cut its key tiles into whole swizzle atoms
// (8 rows of 128 bytes), K and V described alike. PAGEDATTN_PREFILL_TMA=0 turns them off.
// 16-token pages take one box per page (page-major tiles) instead of one per 64 dims, unless
// PAGEDATTN_PREFILL_WHOLE_PAGES=0: the TMA unit's boxes per tile are what page 16 pays for.
// fp8 pages land raw, one box per page of rows of the kernel's dims, which the producer widens.
bool use_page_boxes(const detail::AttentionProblem& p, PrefillKernelParams& prm) {
  if (detail::env_switched_off("PAGEDATTN_PREFILL_TMA")) return false;
  const std::int64_t P = p.kv.page_size;
  const bool fp8 = is_fp8(p.kv.dtype);
  if (P % 8 != 0 || wgmma_shape(p.head_dim, fp8).tile_keys % P != 0) return false;
  if (fp8) {
    KVPageBoxes raw;
    if (!encode_kv_page_boxes(p.kv, prefill_kernel_dims(p.head_dim), static_cast<int>(P), raw)) return false;
    prm.k_pages = raw.k;
    prm.v_pages = raw.v;
    prm.tma_head_inner = raw.head_inner;
    return true;
  }
  KVPageGroupBoxes groups;
  prm.page_major = P == WgmmaPrefillShape::kPageMajorSlots && !detail::env_switched_off("PAGEDATTN_PREFILL_WHOLE_PAGES") &&
                   encode_kv_page_groups(p.kv, groups);
  if (prm.page_major) {
    prm.k_pages = groups.k;
    prm.v_pages = groups.v;
    prm.page_mul_g = groups.page_mul_g;
    prm.page_mul_h = groups.page_mul_h;
    return true;
  }
  KVPageBoxes boxes;
  if (!encode_kv_page_boxes(p.kv, 64, static_cast<int>(P), boxes)) return false;
  prm.k_pages = boxes.k;
  prm.v_pages = boxes.v;
  prm.tma_head_inner = boxes.head_inner;
  return true;
}

// The mma.sync kernel's shape for p's cache dtype (fp8 or 16-bit), head dims and V tiles.
template <class KV>
PrefillGeometry mma_shape(const detail::AttentionProblem& p) {
  const bool vt = !v_rows(p);
  return with_prefill_kernel_dims(p.head_dim, [vt](auto d_c) {
    constexpr int kD = decltype(d_c)::value;
    return vt ? geometry_of<PrefillSmem<KV, kD, true>>(false) : geometry_of<PrefillSmem<KV, kD, false>>(false);
  });
}

// Why the kernel of geometry g cannot run p on `device` (its shared memory); empty when it can.
std::string shared_memory_unsupported(const detail::AttentionProblem& p, const PrefillGeometry& g, int device) {
  const int have = cached_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (g.cta_smem_bytes <= have) return {};
  return "prefill on CUDA at head_dim " + std::to_string(p.head_dim) + " needs " + std::to_string(g.cta_smem_bytes) +
         " bytes of shared memory per block; this device allows " + std::to_string(have);
}

}  // namespace

PrefillGeometry prefill_geometry(const detail::AttentionProblem& p, int device) {
  const int regs = cached_device_attribute(cudaDevAttrMaxRegistersPerMultiprocessor, device);
  const int smem = cached_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  PrefillGeometry g;
  std::int64_t cta_regs = 0;
  if (hopper_kernel_fits(p, device)) {
    g = wgmma_shape(p.head_dim, is_fp8(p.kv.dtype));
    cta_regs = 65536;  // launch bounds (384, 1): the whole register file
  } else {
    g = is_fp8(p.kv.dtype) ? mma_shape<Fp8E4M3>(p) : mma_shape<__nv_bfloat16>(p);
    cta_regs = kPrefillThreads * 256;  // up to 255 registers per thread
  }
  constexpr std::int64_t kReserve = 1024;  // shared memory the system keeps per CTA
  g.ctas_per_sm = std::max<std::int64_t>(1, std::min(regs / cta_regs, smem / (g.cta_smem_bytes + kReserve)));
  return g;
}

std::string prefill_unsupported_on(const detail::AttentionProblem& p, int device) {
  const std::string why = prefill_unsupported(p);
  return why.empty() ? shared_memory_unsupported(p, prefill_geometry(p, device), device) : why;
}

void prefill(const detail::AttentionProblem& p, std::int64_t max_q, void* stream_ptr, const PrefillSplit& split) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.num_seqs == 0 || max_q == 0) return;
  const std::string why = prefill_unsupported(p);
  check_supported(why.empty(), why);
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current device");
  const PrefillGeometry geometry = prefill_geometry(p, device);
  const std::string smem_why = shared_memory_unsupported(p, geometry, device);
  check_supported(smem_why.empty(), smem_why);
  check_arg(split.splits >= 1 && p.num_kv_heads * split.splits <= detail::kCudaMaxGridYZ &&
                (split.splits == 1 || split.split_tokens % geometry.tile_keys == 0),
            "prefill: bad KV split");
  PrefillKernelParams prm;
  prm.p = p;
  prm.page_div = FastDiv::make(static_cast<std::uint32_t>(p.kv.page_size));
  prm.q_index = split.q_index;
  prm.split_tokens = split.splits > 1 ? split.split_tokens : 0;
  prm.out_split_stride = split.out_split_stride;
  prm.lse_split_stride = split.lse_split_stride;
  const std::int64_t rows = geometry.rows_per_cta;
  const std::int64_t tiles = (max_q * p.group_size() + rows - 1) / rows;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.num_kv_heads * split.splits),
                  static_cast<unsigned>(p.num_seqs));
  prm.v_transposed = !v_rows(p);
  if (geometry.hopper) {
    prm.tma_pages = !prm.v_transposed && use_page_boxes(p, prm);
    switch (p.kv.dtype) {
      case DType::kBF16: launch_paged_prefill_wgmma<__nv_bfloat16>(prm, grid, stream); break;
      case DType::kF16: launch_paged_prefill_wgmma<__half>(prm, grid, stream); break;
      case DType::kF8E4M3: launch_paged_prefill_wgmma<Fp8E4M3>(prm, grid, stream); break;
      default: launch_paged_prefill_wgmma<Fp8E5M2>(prm, grid, stream); break;
    }
    check_launch("paged_prefill_wgmma_kernel", stream);
    return;
  }
  prm.v_runs = prm.v_transposed && v_runs_vectorisable(p.kv);
  const int d = static_cast<int>(p.head_dim);
  switch (p.kv.dtype) {
    case DType::kBF16: launch_paged_prefill_mma<__nv_bfloat16, __nv_bfloat16>(prm, d, grid, stream); break;
    case DType::kF16: launch_paged_prefill_mma<__half, __half>(prm, d, grid, stream); break;
    case DType::kF8E4M3: launch_paged_prefill_mma<Fp8E4M3, __half>(prm, d, grid, stream); break;
    default: launch_paged_prefill_mma<Fp8E5M2, __half>(prm, d, grid, stream); break;
  }
  check_launch("paged_prefill_mma_kernel", stream);
}

}  // namespace pagedattn::cuda
