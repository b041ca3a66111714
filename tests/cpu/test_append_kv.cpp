// append_kv on the CPU: the bytes it stores in every layout and cache dtype, checked against this
// file's own reading of the layouts (kv_cache.h), not against the library's offset code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pagedattn/context.h"
#include "pagedattn/dtype.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/ops.h"

namespace pagedattn {
namespace {

constexpr std::int64_t kPages = 3, kPageSize = 4, kHeads = 2, kDim = 32;

// Element index of (page, head, slot, d) in K (is_v false) or V of a contiguous cache.
std::int64_t element_of(KVLayout layout, DType dtype, bool is_v, std::int64_t page, std::int64_t head,
                        std::int64_t slot, std::int64_t d) {
  switch (layout) {
    case KVLayout::kNHD: return ((page * kPageSize + slot) * kHeads + head) * kDim + d;
    case KVLayout::kHND: return ((page * kHeads + head) * kPageSize + slot) * kDim + d;
    case KVLayout::kVllmSplit: {
      if (is_v) return ((page * kHeads + head) * kDim + d) * kPageSize + slot;
      const std::int64_t x = vllm_split_x(dtype);
      return (((page * kHeads + head) * (kDim / x) + d / x) * kPageSize + slot) * x + d % x;
    }
  }
  return -1;
}

// The bytes that hold x in `dtype` (little-endian, as the host stores them).
std::vector<std::uint8_t> encode(DType dtype, float x) {
  std::vector<std::uint8_t> b(dtype_size(dtype));
  switch (dtype) {
    case DType::kF32: std::memcpy(b.data(), &x, sizeof x); break;
    case DType::kF16: {
      const std::uint16_t h = float_to_f16(x);
      std::memcpy(b.data(), &h, sizeof h);
      break;
    }
    case DType::kBF16: {
      const std::uint16_t h = float_to_bf16(x);
      std::memcpy(b.data(), &h, sizeof h);
      break;
    }
    case DType::kF8E4M3: b[0] = float_to_fp8_e4m3(x); break;
    case DType::kF8E5M2: b[0] = float_to_fp8_e5m2(x); break;
    default: ADD_FAILURE() << "not a KV dtype";
  }
  return b;
}

// The value the bytes of `dtype` at p hold.
float decode(DType dtype, const std::uint8_t* p) {
  switch (dtype) {
    case DType::kF32: {
      float x;
      std::memcpy(&x, p, sizeof x);
      return x;
    }
    case DType::kF16:
    case DType::kBF16: {
      std::uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return dtype == DType::kF16 ? f16_to_float(h) : bf16_to_float(h);
    }
    case DType::kF8E4M3: return fp8_e4m3_to_float(*p);
    case DType::kF8E5M2: return fp8_e5m2_to_float(*p);
    default: ADD_FAILURE() << "not a KV dtype";
  }
  return 0.0f;
}

struct Case {
  KVLayout layout;
  DType cache_dtype;
  DType input_dtype;
  DType slot_dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(to_string(info.param.layout)) + "_" + std::string(to_string(info.param.cache_dtype)) +
         "_from_" + std::string(to_string(info.param.input_dtype)) + "_" + std::string(to_string(info.param.slot_dtype));
}

class AppendKVBytes : public ::testing::TestWithParam<Case> {};

// Input of the cache's own dtype is stored unchanged (fp8 input is taken as already quantised).
// Any other input is read as its plain value x and stored as x in the cache's dtype (rounded to
// nearest even), fp8 caches storing round(x * (1 / scale)).
TEST_P(AppendKVBytes, StoresWhatTheContractSays) {
  const Case c = GetParam();
  const float k_scale = 0.5f, v_scale = 4.0f;
  const bool fp8 = is_fp8(c.cache_dtype);
  KVCacheSpec spec{c.layout, c.cache_dtype, kPages, kPageSize, kHeads, kDim};
  std::vector<std::uint8_t> k_cache(static_cast<std::size_t>(spec.bytes_per_tensor()), 0xFF);
  std::vector<std::uint8_t> v_cache(k_cache.size(), 0xFF);
  PagedKV cache = spec.make_views(k_cache.data(), v_cache.data());
  if (fp8) {
    cache.k_scale = k_scale;
    cache.v_scale = v_scale;
  }

  const std::vector<std::int64_t> slots = {7, 0, 11, -1, 2};
  const auto n = static_cast<std::int64_t>(slots.size());
  const std::size_t elems = static_cast<std::size_t>(n * kHeads * kDim);
  const std::size_t in_size = dtype_size(c.input_dtype), esize = dtype_size(c.cache_dtype);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  // Inputs: random values in the input dtype; k_val / v_val the values they hold.
  std::vector<std::uint8_t> k_in(elems * in_size), v_in(elems * in_size);
  std::vector<float> k_val(elems), v_val(elems);
  for (std::size_t i = 0; i < elems; ++i) {
    for (auto [in, val] : {std::pair{&k_in, &k_val}, std::pair{&v_in, &v_val}}) {
      const std::vector<std::uint8_t> b = encode(c.input_dtype, uni(rng));
      std::copy(b.begin(), b.end(), in->begin() + static_cast<std::ptrdiff_t>(i * in_size));
      (*val)[i] = decode(c.input_dtype, b.data());
    }
  }
  const bool raw = c.input_dtype == c.cache_dtype;
  TensorView k(k_in.data(), c.input_dtype, {n, kHeads, kDim});
  TensorView v(v_in.data(), c.input_dtype, {n, kHeads, kDim});
  std::vector<std::int32_t> slots32(slots.begin(), slots.end());
  TensorView slot_view = c.slot_dtype == DType::kI32
                             ? TensorView(slots32.data(), DType::kI32, {n})
                             : TensorView(const_cast<std::int64_t*>(slots.data()), DType::kI64, {n});
  append_kv(Context::cpu(1), cache, k, v, slot_view);

  auto want = [&](const std::vector<std::uint8_t>& in, const std::vector<float>& val, std::size_t i, float scale) {
    if (raw) return std::vector<std::uint8_t>(in.begin() + static_cast<std::ptrdiff_t>(i * in_size),
                                              in.begin() + static_cast<std::ptrdiff_t>((i + 1) * in_size));
    return encode(c.cache_dtype, fp8 ? val[i] * (1.0f / scale) : val[i]);
  };
  auto stored = [&](const std::vector<std::uint8_t>& cache_bytes, std::int64_t e) {
    const auto at = cache_bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(e) * esize);
    return std::vector<std::uint8_t>(at, at + static_cast<std::ptrdiff_t>(esize));
  };
  // Elements written, of K and of V (their element orders differ in vLLM's split layout).
  std::vector<bool> k_written(k_cache.size() / esize, false), v_written(k_written);
  for (std::int64_t t = 0; t < n; ++t) {
    if (slots[static_cast<std::size_t>(t)] < 0) continue;
    const std::int64_t page = slots[static_cast<std::size_t>(t)] / kPageSize;
    const std::int64_t slot = slots[static_cast<std::size_t>(t)] % kPageSize;
    for (std::int64_t h = 0; h < kHeads; ++h) {
      for (std::int64_t d = 0; d < kDim; ++d) {
        const auto i = static_cast<std::size_t>((t * kHeads + h) * kDim + d);
        const std::int64_t ke = element_of(c.layout, c.cache_dtype, false, page, h, slot, d);
        const std::int64_t ve = element_of(c.layout, c.cache_dtype, true, page, h, slot, d);
        ASSERT_EQ(stored(k_cache, ke), want(k_in, k_val, i, k_scale)) << "K token " << t << " head " << h << " dim " << d;
        ASSERT_EQ(stored(v_cache, ve), want(v_in, v_val, i, v_scale)) << "V token " << t << " head " << h << " dim " << d;
        k_written[static_cast<std::size_t>(ke)] = true;
        v_written[static_cast<std::size_t>(ve)] = true;
      }
    }
  }
  // Slots no token names keep their bytes.
  const std::vector<std::uint8_t> untouched(esize, 0xFF);
  for (std::size_t e = 0; e < k_written.size(); ++e) {
    const auto at = static_cast<std::int64_t>(e);
    if (!k_written[e]) ASSERT_EQ(stored(k_cache, at), untouched) << "K element " << e << " was not to be written";
    if (!v_written[e]) ASSERT_EQ(stored(v_cache, at), untouched) << "V element " << e << " was not to be written";
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit}) {
    for (DType cache : {DType::kF8E4M3, DType::kF8E5M2})
      for (DType input : {cache, DType::kBF16}) out.push_back({layout, cache, input, DType::kI64});
    // 16- and 32-bit caches: their own dtype (bytes copied) and another one (converted, rounded).
    out.push_back({layout, DType::kF32, DType::kF32, DType::kI32});
    out.push_back({layout, DType::kF32, DType::kBF16, DType::kI64});
    out.push_back({layout, DType::kBF16, DType::kBF16, DType::kI64});
    out.push_back({layout, DType::kBF16, DType::kF32, DType::kI32});
    out.push_back({layout, DType::kF16, DType::kF16, DType::kI32});
    out.push_back({layout, DType::kF16, DType::kF32, DType::kI64});
    out.push_back({layout, DType::kBF16, DType::kF16, DType::kI64});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllCaches, AppendKVBytes, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace pagedattn
