// Tensor views to and from DLPack: every dtype, strided views, byte offsets, row-major default
// strides, devices (CPU, page-locked host, CUDA, managed), copies of the exported view, a cache
// built from imported tensors, and every unsupported input rejected with an Error naming it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pagedattn/dlpack.h"
#include "pagedattn/error.h"
#include "pagedattn/kv_cache.h"

namespace pagedattn {
namespace {

void expect_same_view(const TensorView& a, const TensorView& b) {
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(a.device(), b.device());
  ASSERT_EQ(a.rank(), b.rank());
  for (int d = 0; d < a.rank(); ++d) {
    EXPECT_EQ(a.size(d), b.size(d)) << "dim " << d;
    EXPECT_EQ(a.stride(d), b.stride(d)) << "dim " << d;
  }
}

TEST(DLPack, RoundTripsEveryDtype) {
  std::vector<std::byte> mem(4096);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI32, DType::kI64}) {
    const TensorView view(mem.data(), t, {3, 4, 5}, {40, 10, 2});  // strided: every other element
    const DLPackView exported(view);
    const std::optional<DType> fp8 = is_fp8(t) ? std::optional(t) : std::nullopt;
    expect_same_view(from_dlpack(exported.tensor(), fp8), view);
  }
}

// An f32 CPU tensor over `data`, row-major (null strides).
DLTensor f32_tensor(float* data, std::int64_t* shape, int ndim) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  return t;
}

TEST(DLPack, ImportsOffsetsDefaultStridesAndDevices) {
  std::vector<float> mem(64);
  std::int64_t shape[] = {2, 3, 4};
  DLTensor t = f32_tensor(mem.data(), shape, 3);
  t.byte_offset = 8;
  const TensorView v = from_dlpack(t);
  EXPECT_EQ(v.data(), mem.data() + 2);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.stride(1), 4);
  EXPECT_EQ(v.stride(2), 1);
  EXPECT_TRUE(v.is_contiguous());
  t.device = {kDLCUDAHost, 0};
  EXPECT_EQ(from_dlpack(t).device(), Device::cpu());
  t.device = {kDLCUDA, 1};
  EXPECT_EQ(from_dlpack(t).device(), Device::cuda(1));
  t.device = {kDLCUDAManaged, 0};
  EXPECT_EQ(from_dlpack(t).device(), Device::cuda(0));
  t.ndim = 0;  // a scalar
  EXPECT_EQ(from_dlpack(t).rank(), 0);
}

TEST(DLPack, ExportedViewsSurviveCopies) {
  std::vector<std::int64_t> mem(6);
  const TensorView view(mem.data(), DType::kI64, {2, 3}, Device::cuda(2));
  DLPackView a(view);
  const DLPackView b = a;
  DLPackView c(TensorView(mem.data(), DType::kI64, {6}));
  c = a;
  for (const DLPackView* e : std::initializer_list<const DLPackView*>{&a, &b, &c}) {
    EXPECT_EQ(e->tensor().device.device_type, kDLCUDA);
    EXPECT_EQ(e->tensor().device.device_id, 2);
    EXPECT_EQ(e->tensor().shape[1], 3);
    EXPECT_EQ(e->tensor().strides[0], 3);
  }
  EXPECT_NE(b.tensor().shape, a.tensor().shape);  // the copy's own storage
  EXPECT_NE(c.tensor().strides, a.tensor().strides);
}

// A cache whose K and V come from a framework as DLPack tensors reads back its geometry.
TEST(DLPack, CacheViewsFromImportedTensors) {
  const KVCacheSpec spec{.layout = KVLayout::kHND, .dtype = DType::kBF16, .num_pages = 5, .page_size = 16,
                         .num_kv_heads = 2, .head_dim = 64};
  std::vector<std::byte> k(static_cast<std::size_t>(spec.bytes_per_tensor())), v(k.size());
  const PagedKV made = spec.make_views(k.data(), v.data());
  PagedKV imported;
  imported.layout = KVLayout::kHND;
  imported.k = from_dlpack(DLPackView(made.k).tensor());
  imported.v = from_dlpack(DLPackView(made.v).tensor());
  const KVCacheSpec back = KVCacheSpec::from_views(imported);
  EXPECT_EQ(back.num_pages, 5);
  EXPECT_EQ(back.page_size, 16);
  EXPECT_EQ(back.num_kv_heads, 2);
  EXPECT_EQ(back.head_dim, 64);
}

// An undefined view has no tensor to export: as a 0-d DLTensor it would claim one element at
// a null address.
TEST(DLPackErrors, ExportOfAnUndefinedViewIsRejected) {
  EXPECT_THROW((void)DLPackView(TensorView{}), Error);
}

TEST(DLPackErrors, RejectsWhatHasNoView) {
  std::vector<float> mem(16);
  std::int64_t shape[7] = {2, 2, 1, 1, 1, 1, 1};
  auto base = [&] { return f32_tensor(mem.data(), shape, 2); };
  auto expect_error = [](const DLTensor& t, std::optional<DType> fp8, const std::string& needle) {
    try {
      (void)from_dlpack(t, fp8);
      ADD_FAILURE() << "accepted; expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  { DLTensor t = base(); t.dtype.lanes = 4; expect_error(t, {}, "vector lanes"); }
  { DLTensor t = base(); t.dtype = {kDLComplex, 64, 1}; expect_error(t, {}, "has no pagedattn dtype"); }
  { DLTensor t = base(); t.dtype = {kDLFloat, 64, 1}; expect_error(t, {}, "code 2, 64 bits"); }
  { DLTensor t = base(); t.device = {kDLOpenCL, 0}; expect_error(t, {}, "neither the CPU nor a CUDA GPU"); }
  { DLTensor t = base(); t.ndim = 7; expect_error(t, {}, "has 7 dimensions"); }
  { DLTensor t = base(); t.shape = nullptr; expect_error(t, {}, "null shape"); }
  { DLTensor t = base(); t.data = nullptr; expect_error(t, {}, "null data pointer"); }
  { DLTensor t = base(); expect_error(t, DType::kF8E4M3, "comes as uint8"); }
  { DLTensor t = base(); t.dtype = {kDLUInt, 8, 1}; expect_error(t, DType::kBF16, "not an fp8 dtype"); }
  { DLTensor t = base(); t.dtype = {kDLUInt, 8, 1}; expect_error(t, {}, "has no pagedattn dtype"); }
  {
    std::int64_t negative[] = {2, -1};
    DLTensor t = base();
    t.shape = negative;
    expect_error(t, {}, "negative size in dimension 1");
  }
}

}  // namespace
}  // namespace pagedattn
