// append_kv on the CPU: the bytes it stores in every layout, checked against this file's own
// reading of the layouts (kv_cache.h), not against the library's offset code.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
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

std::uint8_t encode_fp8(DType dtype, float x) {
  return dtype == DType::kF8E4M3 ? float_to_fp8_e4m3(x) : float_to_fp8_e5m2(x);
}

struct Case {
  KVLayout layout;
  DType cache_dtype;
  DType input_dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(to_string(info.param.layout)) + "_" + std::string(to_string(info.param.cache_dtype)) +
         "_from_" + std::string(to_string(info.param.input_dtype));
}

class AppendKVBytes : public ::testing::TestWithParam<Case> {};

// fp8 input of the cache's own dtype is already quantised: its bytes are stored unchanged in
// every layout. Any other input is stored as round(x / scale).
TEST_P(AppendKVBytes, StoresWhatTheContractSays) {
  const Case c = GetParam();
  const float k_scale = 0.5f, v_scale = 4.0f;
  KVCacheSpec spec{c.layout, c.cache_dtype, kPages, kPageSize, kHeads, kDim};
  std::vector<std::uint8_t> k_cache(static_cast<std::size_t>(spec.bytes_per_tensor()), 0xFF);
  std::vector<std::uint8_t> v_cache(k_cache.size(), 0xFF);
  PagedKV cache = spec.make_views(k_cache.data(), v_cache.data());
  cache.k_scale = k_scale;
  cache.v_scale = v_scale;

  const std::vector<std::int64_t> slots = {7, 0, 11, -1, 2};
  const auto n = static_cast<std::int64_t>(slots.size());
  const std::size_t elems = static_cast<std::size_t>(n * kHeads * kDim);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  // Inputs: fp8 bytes of finite values, or bf16 values, as the case asks.
  std::vector<std::uint8_t> k_fp8(elems), v_fp8(elems);
  std::vector<std::uint16_t> k_bf16(elems), v_bf16(elems);
  std::vector<float> k_val(elems), v_val(elems);
  for (std::size_t i = 0; i < elems; ++i) {
    if (c.input_dtype == c.cache_dtype) {
      k_fp8[i] = encode_fp8(c.cache_dtype, uni(rng));
      v_fp8[i] = encode_fp8(c.cache_dtype, uni(rng));
    } else {
      k_bf16[i] = float_to_bf16(uni(rng));
      v_bf16[i] = float_to_bf16(uni(rng));
      k_val[i] = bf16_to_float(k_bf16[i]);
      v_val[i] = bf16_to_float(v_bf16[i]);
    }
  }
  const bool raw = c.input_dtype == c.cache_dtype;
  TensorView k(raw ? static_cast<void*>(k_fp8.data()) : k_bf16.data(), c.input_dtype, {n, kHeads, kDim});
  TensorView v(raw ? static_cast<void*>(v_fp8.data()) : v_bf16.data(), c.input_dtype, {n, kHeads, kDim});
  TensorView slot_view(const_cast<std::int64_t*>(slots.data()), DType::kI64, {n});
  append_kv(Context::cpu(1), cache, k, v, slot_view);

  std::vector<bool> written(k_cache.size(), false);
  for (std::int64_t t = 0; t < n; ++t) {
    if (slots[static_cast<std::size_t>(t)] < 0) continue;
    const std::int64_t page = slots[static_cast<std::size_t>(t)] / kPageSize;
    const std::int64_t slot = slots[static_cast<std::size_t>(t)] % kPageSize;
    for (std::int64_t h = 0; h < kHeads; ++h) {
      for (std::int64_t d = 0; d < kDim; ++d) {
        const auto i = static_cast<std::size_t>((t * kHeads + h) * kDim + d);
        const auto ke = static_cast<std::size_t>(element_of(c.layout, c.cache_dtype, false, page, h, slot, d));
        const auto ve = static_cast<std::size_t>(element_of(c.layout, c.cache_dtype, true, page, h, slot, d));
        const std::uint8_t k_want = raw ? k_fp8[i] : encode_fp8(c.cache_dtype, k_val[i] * (1.0f / k_scale));
        const std::uint8_t v_want = raw ? v_fp8[i] : encode_fp8(c.cache_dtype, v_val[i] * (1.0f / v_scale));
        ASSERT_EQ(k_cache[ke], k_want) << "K token " << t << " head " << h << " dim " << d;
        ASSERT_EQ(v_cache[ve], v_want) << "V token " << t << " head " << h << " dim " << d;
        written[ke] = true;
      }
    }
  }
  // Slots no token names keep their bytes (K and V share the element mapping's size).
  for (std::size_t e = 0; e < k_cache.size(); ++e) {
    if (!written[e]) ASSERT_EQ(k_cache[e], 0xFF) << "K element " << e << " was not to be written";
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (KVLayout layout : {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit})
    for (DType cache : {DType::kF8E4M3, DType::kF8E5M2})
      for (DType input : {cache, DType::kBF16}) out.push_back({layout, cache, input});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fp8, AppendKVBytes, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace pagedattn
