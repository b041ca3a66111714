#include <cudaTypedefs.h>

#include <array>
#include <cstdint>
#include <initializer_list>

#include "core/env_switch.h"
#include "cuda/page_tensor_map.h"

namespace pagedattn::cuda {

namespace {

// cuTensorMapEncodeTiled from the driver, found once through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      static_cast<void>(cudaGetLastError());
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return fn;
}

// A map's byte strides as the driver takes them: positive multiples of 16 below 2^40.
bool valid_strides(std::initializer_list<std::int64_t> strides) {
  for (const std::int64_t stride : strides) {
    if (stride <= 0 || stride % 16 != 0 || stride >= (std::int64_t{1} << 40)) return false;
  }
  return true;
}

// How far L2 widens a box row's fetch: not at all. A 16-bit box row is 128 bytes (the swizzle's
// width): a 256-byte fetch brings the row's other half, which the box asks for anyway, and L2
// looked up a third more sectors for the same DRAM reads (a quarter of them "hits" on the promoted
// half of a row): H200, decode 64 x 2048 (ncu: lts__t_sectors per dram__sectors_read 2.02 -> 1.52
// MHA, 2.06 -> 1.56 GQA; hit rate 26 -> 1-2%), and with L2 near its peak that held DRAM to 83%.
// Every 16-bit TMA decode shape ran 7-9% faster without it (docs/perf-notes.md, v47).
// PAGEDATTN_TMA_L2_PROMOTION=64 / 128 / 256 (bytes) asks for one, for measurements.
CUtensorMapL2promotion l2_promotion() {
  switch (detail::env_int("PAGEDATTN_TMA_L2_PROMOTION", 0, 256).value_or(0)) {
    case 64: return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case 128: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case 256: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    default: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  }
}

// A tensor map with unit element steps: 16-bit elements (bf16 or f16) in the 128-byte swizzle
// that wgmma and ldmatrix read, or fp8 bytes (rows that a kernel widens itself before its matrix
// units read them) unswizzled or, with `fp8_swizzled`, in the same swizzle; false when the driver
// refuses it or cannot be found.
template <std::size_t kRank>
bool encode_tiled(CUtensorMap& map, DType dtype, const void* data, const std::array<cuuint64_t, kRank>& dims,
                  const std::array<cuuint64_t, kRank - 1>& strides, const std::array<cuuint32_t, kRank>& box,
                  bool fp8_swizzled = false) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (encode == nullptr) return false;
  const CUtensorMapDataType type = is_fp8(dtype)           ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                           : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUtensorMapSwizzle swizzle =
      is_fp8(dtype) && !fp8_swizzled ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B;
  std::array<cuuint32_t, kRank> steps;
  steps.fill(1);
  return encode(&map, type, static_cast<cuuint32_t>(kRank), const_cast<void*>(data), dims.data(), strides.data(), box.data(),
                steps.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2_promotion(),
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// One of K or V (t) of the cache kv as a tensor map, and its coordinate order.
struct PageBoxes {
  CUtensorMap map;
  bool head_inner = true;
};

bool encode_page_boxes(const detail::KVTensorAccess& t, const detail::KVCacheAccess& kv, int box_dims, int box_slots,
                       bool whole_rows, bool fp8_swizzled, PageBoxes& out) {
  const DType dtype = kv.dtype;
  const bool fp8 = is_fp8(dtype);
  if (dtype != DType::kBF16 && dtype != DType::kF16 && !(fp8 && !whole_rows)) return false;
  const std::int64_t elem_bytes = fp8 ? 1 : 2;
  // A swizzled box row is at most the swizzle's 128 bytes; an unswizzled one up to 256 elements.
  const std::int64_t max_row_bytes = fp8 && !fp8_swizzled ? 256 : 128;
  if (!t.dim_contiguous(kv.head_dim) || box_slots < 1 || box_slots > 256 || box_slots > kv.page_size ||
      box_dims * elem_bytes > max_row_bytes || box_dims * elem_bytes % 16 != 0) {
    return false;
  }
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
  // A dimension of extent 1 is never stepped along: any valid stride will do.
  const std::int64_t head_bytes = kv.num_kv_heads > 1 ? t.head_stride * elem_bytes : 16;
  const std::int64_t slot_bytes = t.token_stride * elem_bytes, page_bytes = t.page_stride * elem_bytes;
  if (!valid_strides({head_bytes, slot_bytes, page_bytes}) || kv.num_pages >= (std::int64_t{1} << 31)) return false;
  if (whole_rows) {
    // (dim % box_dims, slot, dim / box_dims, head, page): the strides need not grow outwards
    // (the driver takes any order), so one box holds every dim of its slots, block after block.
    if (kv.head_dim % box_dims != 0 || kv.head_dim / box_dims > 256) return false;
    out.head_inner = true;
    const auto blocks = static_cast<cuuint32_t>(kv.head_dim / box_dims);
    const std::array<cuuint64_t, 5> dims = {static_cast<cuuint64_t>(box_dims), static_cast<cuuint64_t>(kv.page_size), blocks,
                                            static_cast<cuuint64_t>(kv.num_kv_heads), static_cast<cuuint64_t>(kv.num_pages)};
    const std::array<cuuint64_t, 4> strides = {static_cast<cuuint64_t>(slot_bytes), static_cast<cuuint64_t>(box_dims * elem_bytes),
                                               static_cast<cuuint64_t>(head_bytes), static_cast<cuuint64_t>(page_bytes)};
    const std::array<cuuint32_t, 5> box = {static_cast<cuuint32_t>(box_dims), static_cast<cuuint32_t>(box_slots), blocks, 1, 1};
    return encode_tiled(out.map, dtype, t.data, dims, strides, box);
  }
  out.head_inner = head_bytes <= slot_bytes;
  const auto heads = static_cast<cuuint64_t>(kv.num_kv_heads), slots = static_cast<cuuint64_t>(kv.page_size);
  const std::array<cuuint64_t, 4> dims = {static_cast<cuuint64_t>(kv.head_dim), out.head_inner ? heads : slots,
                                          out.head_inner ? slots : heads, static_cast<cuuint64_t>(kv.num_pages)};
  const std::array<cuuint64_t, 3> strides = {static_cast<cuuint64_t>(out.head_inner ? head_bytes : slot_bytes),
                                             static_cast<cuuint64_t>(out.head_inner ? slot_bytes : head_bytes),
                                             static_cast<cuuint64_t>(page_bytes)};
  const auto P = static_cast<cuuint32_t>(box_slots);
  const std::array<cuuint32_t, 4> box = {static_cast<cuuint32_t>(box_dims), out.head_inner ? 1u : P,
                                         out.head_inner ? P : 1u, 1u};
  return encode_tiled(out.map, dtype, t.data, dims, strides, box, fp8_swizzled);
}

// One of K or V as slot-group page boxes (see KVPageGroupBoxes); mul_g / mul_h: its
// coordinates' page multipliers.
bool encode_page_groups(const detail::KVTensorAccess& t, const detail::KVCacheAccess& kv, CUtensorMap& map, int& mul_g,
                        int& mul_h) {
  constexpr std::int64_t kElem = 2, kGroupSlots = 8, kPageSlots = 16, kDims = 128, kBoxDims = 64;
  if ((kv.dtype != DType::kBF16 && kv.dtype != DType::kF16) || kv.page_size != kPageSlots || kv.head_dim != kDims ||
      !t.dim_contiguous(kv.head_dim) || reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
    return false;
  }
  const std::int64_t H = kv.num_kv_heads;
  const std::int64_t slot_bytes = t.token_stride * kElem, page_bytes = t.page_stride * kElem;
  const std::int64_t head_bytes = H > 1 ? t.head_stride * kElem : page_bytes;  // one head: any stride
  std::int64_t g_stride = 0, g_extent = 0, h_stride = 0, h_extent = 0;
  if (page_bytes == kPageSlots * slot_bytes) {  // slots outermost in a page: G over the pool's groups
    mul_g = 2, mul_h = 0;
    g_stride = kGroupSlots * slot_bytes, g_extent = 2 * kv.num_pages;
    h_stride = H > 1 ? head_bytes : 16, h_extent = H;
  } else if (page_bytes == H * head_bytes) {  // heads outermost: H over the pool's (page, head)
    mul_g = 0, mul_h = static_cast<int>(H);
    g_stride = kGroupSlots * slot_bytes, g_extent = 2;
    h_stride = head_bytes, h_extent = H * kv.num_pages;
  } else {
    return false;
  }
  if (!valid_strides({slot_bytes, g_stride, h_stride})) return false;
  if (g_extent >= (std::int64_t{1} << 31) || h_extent >= (std::int64_t{1} << 31)) return false;  // int coordinates
  const std::array<cuuint64_t, 5> dims = {kBoxDims, kGroupSlots, kDims / kBoxDims, static_cast<cuuint64_t>(g_extent),
                                          static_cast<cuuint64_t>(h_extent)};
  const std::array<cuuint64_t, 4> strides = {static_cast<cuuint64_t>(slot_bytes), kBoxDims * kElem,
                                             static_cast<cuuint64_t>(g_stride), static_cast<cuuint64_t>(h_stride)};
  const std::array<cuuint32_t, 5> box = {kBoxDims, kGroupSlots, kDims / kBoxDims, 2, 1};
  return encode_tiled(map, kv.dtype, t.data, dims, strides, box);
}

}  // namespace

bool encode_kv_page_groups(const detail::KVCacheAccess& kv, KVPageGroupBoxes& out) {
  int k_mul_g = 0, k_mul_h = 0, v_mul_g = 0, v_mul_h = 0;
  if (!encode_page_groups(kv.k, kv, out.k, k_mul_g, k_mul_h) || !encode_page_groups(kv.v, kv, out.v, v_mul_g, v_mul_h) ||
      k_mul_g != v_mul_g || k_mul_h != v_mul_h) {
    return false;
  }
  out.page_mul_g = k_mul_g;
  out.page_mul_h = k_mul_h;
  return true;
}

bool encode_kv_page_boxes(const detail::KVCacheAccess& kv, int box_dims, int box_slots, KVPageBoxes& out,
                          bool whole_rows, bool fp8_swizzled) {
  PageBoxes k, v;
  if (!encode_page_boxes(kv.k, kv, box_dims, box_slots, whole_rows, fp8_swizzled, k) ||
      !encode_page_boxes(kv.v, kv, box_dims, box_slots, whole_rows, fp8_swizzled, v) ||
      k.head_inner != v.head_inner) {
    return false;
  }
  out.k = k.map;
  out.v = v.map;
  out.head_inner = k.head_inner;
  return true;
}

}  // namespace pagedattn::cuda
