// Test helpers for the CUDA cache writes: a host buffer with a device twin holding the same
// bytes, and a KV cache of any layout built over one, with random (poisoned) contents, so that
// the CPU op runs on the host copy, the CUDA op on the device copy, and the bytes compare.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "pagedattn/kv_cache.h"

namespace pagedattn::test {

// Host bytes and a device buffer of the same size; views over the host bytes map to the same
// offset on the device.
struct Twin {
  std::vector<std::byte> host;
  DeviceBuffer dev;

  explicit Twin(std::size_t bytes = 1) : host(std::max<std::size_t>(bytes, 1)), dev(host.size()) {}
  void upload() { dev.upload(host.data()); }
  std::vector<std::byte> download() const { return dev.snapshot(); }
  TensorView device_view(const TensorView& h) const {
    const std::ptrdiff_t offset = static_cast<const std::byte*>(h.data()) - host.data();
    return TensorView::rebind(h, static_cast<std::byte*>(dev.get()) + offset, Device::cuda(0));
  }
  void fill_random(std::mt19937_64& rng) {
    for (auto& b : host) b = static_cast<std::byte>(rng() & 0xffu);
  }
};

// "" when equal, else where and how often they differ.
inline std::string first_difference(const std::vector<std::byte>& got, const std::vector<std::byte>& want) {
  if (got.size() != want.size()) return "sizes differ";
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(got.size()) + " bytes differ; first at byte " +
         std::to_string(first) + ": got " + std::to_string(static_cast<int>(got[first])) + ", expected " +
         std::to_string(static_cast<int>(want[first]));
}

struct CacheGeom {
  KVLayout layout = KVLayout::kNHD;
  DType dtype = DType::kBF16;
  std::int64_t num_pages = 24, page_size = 16, num_kv_heads = 2, head_dim = 128;
  bool stacked = false;     // one [num_pages, 2, ...] tensor (NHD, HND)
  bool padded = false;      // rows of head_dim + 8 elements: pages are not dense (NHD, HND)
  std::int64_t elem_offset = 0;  // the cache starts this many elements into its buffer
  bool head_scales = false;      // fp8: per-head scales
};

struct TwinCache {
  Twin pool;  // K, then V (or the stacked tensor), after elem_offset elements
  std::vector<float> scales;  // per-head: K's, then V's
  DeviceBuffer device_scales;
  PagedKV host, device;
};

inline TwinCache make_cache(const CacheGeom& g, std::mt19937_64& rng) {
  const auto esize = static_cast<std::int64_t>(dtype_size(g.dtype));
  const std::int64_t P = g.page_size, H = g.num_kv_heads, D = g.head_dim;
  const std::int64_t row = g.padded ? D + 8 : D;
  const std::int64_t tensor_elems = g.num_pages * P * H * row;
  TwinCache c;
  c.pool = Twin(static_cast<std::size_t>((g.elem_offset + 2 * tensor_elems + 64) * esize));
  c.pool.fill_random(rng);
  std::byte* base = c.pool.host.data() + g.elem_offset * esize;
  const bool nhd = g.layout == KVLayout::kNHD;
  if (g.stacked) {
    const TensorView kv = nhd ? TensorView(base, g.dtype, {g.num_pages, 2, P, H, D})
                              : TensorView(base, g.dtype, {g.num_pages, 2, H, P, D});
    c.host = PagedKV::from_stacked(kv, g.layout);
  } else if (g.padded) {
    c.host.layout = g.layout;
    for (int side = 0; side < 2; ++side) {
      std::byte* p = base + side * tensor_elems * esize;
      const TensorView t = nhd ? TensorView(p, g.dtype, {g.num_pages, P, H, D}, {P * H * row, H * row, row, 1})
                               : TensorView(p, g.dtype, {g.num_pages, H, P, D}, {H * P * row, P * row, row, 1});
      (side == 0 ? c.host.k : c.host.v) = t;
    }
  } else {
    const KVCacheSpec spec{g.layout, g.dtype, g.num_pages, P, H, D};
    c.host = spec.make_views(base, base + tensor_elems * esize);
  }
  if (is_fp8(g.dtype)) {
    std::uniform_real_distribution<float> scale(0.006f, 0.03f);
    c.host.k_scale = scale(rng);
    c.host.v_scale = scale(rng);
    if (g.head_scales) {
      for (std::int64_t i = 0; i < 2 * H; ++i) c.scales.push_back(scale(rng));
      c.host.k_head_scales = TensorView(c.scales.data(), DType::kF32, {H});
      c.host.v_head_scales = TensorView(c.scales.data() + H, DType::kF32, {H});
      c.device_scales = DeviceBuffer(c.scales.size() * sizeof(float));
      c.device_scales.upload(c.scales.data());
    }
  }
  c.pool.upload();
  c.device = c.host;
  c.device.k = c.pool.device_view(c.host.k);
  c.device.v = c.pool.device_view(c.host.v);
  if (g.head_scales && is_fp8(g.dtype)) {
    auto* d = static_cast<float*>(c.device_scales.get());
    c.device.k_head_scales = TensorView(d, DType::kF32, {H}, Device::cuda(0));
    c.device.v_head_scales = TensorView(d + H, DType::kF32, {H}, Device::cuda(0));
  }
  return c;
}

inline std::string geom_name(const CacheGeom& g) {
  std::string s = std::string(to_string(g.layout)) + "_" + std::string(to_string(g.dtype)) + "_d" +
                  std::to_string(g.head_dim) + "_p" + std::to_string(g.page_size) + "_h" +
                  std::to_string(g.num_kv_heads);
  if (g.stacked) s += "_stacked";
  if (g.padded) s += "_padded";
  if (g.elem_offset) s += "_offset" + std::to_string(g.elem_offset);
  if (g.head_scales) s += "_headscales";
  return s;
}

}  // namespace pagedattn::test
