#include "paged_fixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "pagedattn/reference.h"

namespace pagedattn::testing {

namespace {
constexpr std::byte kPoison{0xff};

std::int64_t esize(DType t) { return static_cast<std::int64_t>(dtype_size(t)); }

// TensorView only takes initializer lists; tests need ranks 1 to 5 built at run time.
TensorView make_view(void* data, DType dtype, const std::vector<std::int64_t>& shape,
                     const std::vector<std::int64_t>& strides) {
  const auto& s = shape;
  const auto& t = strides;
  switch (shape.size()) {
    case 1: return TensorView(data, dtype, {s[0]}, {t[0]});
    case 2: return TensorView(data, dtype, {s[0], s[1]}, {t[0], t[1]});
    case 3: return TensorView(data, dtype, {s[0], s[1], s[2]}, {t[0], t[1], t[2]});
    case 4: return TensorView(data, dtype, {s[0], s[1], s[2], s[3]}, {t[0], t[1], t[2], t[3]});
    case 5:
      return TensorView(data, dtype, {s[0], s[1], s[2], s[3], s[4]},
                        {t[0], t[1], t[2], t[3], t[4]});
    default: throw std::invalid_argument("make_view: unsupported rank");
  }
}

// Calls fn(i, offset) for every element of `t`: i in row-major logical order, offset in elements.
template <class Fn>
void for_each_element(const TensorView& t, Fn&& fn) {
  const std::int64_t n = t.numel();
  std::vector<std::int64_t> index(static_cast<std::size_t>(t.rank()), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t offset = 0;
    for (int d = 0; d < t.rank(); ++d) offset += index[static_cast<std::size_t>(d)] * t.stride(d);
    fn(i, offset);
    for (int d = t.rank() - 1; d >= 0; --d) {
      if (++index[static_cast<std::size_t>(d)] < t.size(d)) break;
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
}

// The value `x` becomes once stored as `dtype` with `scale` (stored = x / scale).
double quantise(double x, DType dtype, double scale) {
  std::byte tmp[8];
  store_from_float(tmp, dtype, 0, static_cast<float>(x / scale));
  return static_cast<double>(load_as_float(tmp, dtype, 0)) * scale;
}
}  // namespace

// ---- Rng ---------------------------------------------------------------------------------

double Rng::uniform(double lo, double hi) {
  // 53 random bits, so the sequence does not depend on the standard library's distributions.
  const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

std::int64_t Rng::integer(std::int64_t lo, std::int64_t hi) {
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(engine_() % span);
}

// ---- HostTensor --------------------------------------------------------------------------

HostTensor HostTensor::make(DType dtype, std::initializer_list<std::int64_t> shape,
                            std::int64_t pad) {
  std::vector<std::int64_t> sizes(shape), strides(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d-- > 1;) strides[d - 1] = sizes[d] * strides[d] + pad;
  std::int64_t elements = sizes.empty() ? 1 : sizes[0] * strides[0];
  HostTensor t;
  t.storage.assign(static_cast<std::size_t>(std::max<std::int64_t>(elements, 1) * esize(dtype)),
                   kPoison);
  t.view = make_view(t.storage.data(), dtype, sizes, strides);
  return t;
}

std::vector<double> HostTensor::fill_random(Rng& rng, double lo, double hi) {
  std::vector<double> values(static_cast<std::size_t>(view.numel()));
  for (double& x : values) {
    do x = rng.uniform(lo, hi);
    while (std::fabs(x) < 1e-3);
    x = quantise(x, view.dtype(), 1.0);
  }
  fill(values);
  return values;
}

void HostTensor::fill(std::span<const double> values) {
  for_each_element(view, [&](std::int64_t i, std::int64_t offset) {
    store_from_float(view.data(), view.dtype(), offset,
                     static_cast<float>(values[static_cast<std::size_t>(i)]));
  });
}

bool HostTensor::padding_intact() const {
  std::vector<bool> covered(storage.size(), false);
  const std::int64_t es = esize(view.dtype());
  for_each_element(view, [&](std::int64_t, std::int64_t offset) {
    for (std::int64_t b = 0; b < es; ++b) covered[static_cast<std::size_t>(offset * es + b)] = true;
  });
  for (std::size_t b = 0; b < storage.size(); ++b) {
    if (!covered[b] && storage[b] != kPoison) return false;
  }
  return true;
}

// ---- DenseKV -----------------------------------------------------------------------------

DenseKV DenseKV::concat(const DenseKV& a, const DenseKV& b) {
  DenseKV out;
  out.len = a.len + b.len;
  out.k = a.k;
  out.k.insert(out.k.end(), b.k.begin(), b.k.end());
  out.v = a.v;
  out.v.insert(out.v.end(), b.v.begin(), b.v.end());
  return out;
}

// ---- PagedCache --------------------------------------------------------------------------

PagedCache::PagedCache(const CacheSpec& spec, Rng& rng) : spec_(spec) {
  const std::int64_t P = spec.num_pages, S = spec.page_size, H = spec.num_kv_heads,
                     D = spec.head_dim;
  const std::int64_t page_elems = S * H * D;
  if (spec.stacked && spec.layout == KVLayout::kVllmSplit) {
    throw std::invalid_argument("the vllm layout cannot be stacked");
  }
  const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(P * page_elems, 1) *
                                              esize(spec.dtype));
  kv_.layout = spec.layout;
  if (spec.stacked) {
    k_bytes_.assign(2 * bytes, kPoison);
    const std::vector<std::int64_t> inner =
        spec.layout == KVLayout::kNHD ? std::vector<std::int64_t>{S, H, D}
                                      : std::vector<std::int64_t>{H, S, D};
    const TensorView stacked =
        make_view(k_bytes_.data(), spec.dtype, {P, 2, inner[0], inner[1], inner[2]},
                  {2 * page_elems, page_elems, inner[1] * inner[2], inner[2], 1});
    kv_ = PagedKV::from_stacked(stacked, spec.layout);
  } else {
    k_bytes_.assign(bytes, kPoison);
    v_bytes_.assign(bytes, kPoison);
    std::vector<std::int64_t> k_shape, v_shape;
    switch (spec.layout) {
      case KVLayout::kNHD: k_shape = v_shape = {P, S, H, D}; break;
      case KVLayout::kHND: k_shape = v_shape = {P, H, S, D}; break;
      case KVLayout::kVllmSplit: {
        const std::int64_t x = vllm_split_x(spec.dtype);
        k_shape = {P, H, D / x, S, x};
        v_shape = {P, H, D, S};
        break;
      }
    }
    auto contiguous = [](const std::vector<std::int64_t>& shape) {
      std::vector<std::int64_t> strides(shape.size(), 1);
      for (std::size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
      return strides;
    };
    kv_.k = make_view(k_bytes_.data(), spec.dtype, k_shape, contiguous(k_shape));
    kv_.v = make_view(v_bytes_.data(), spec.dtype, v_shape, contiguous(v_shape));
  }
  kv_.layout = spec.layout;
  if (is_fp8(spec.dtype)) {
    // Scales that are not powers of two, so a misapplied scale cannot be exact by luck.
    const double base = spec.dtype == DType::kF8E4M3 ? 1.0 / 58 : 1.0 / 230;
    kv_.k_scale = static_cast<float>(base * 1.1);
    kv_.v_scale = static_cast<float>(base * 0.8);
    if (spec.per_head_scales) {
      for (std::int64_t h = 0; h < H; ++h) {
        k_head_scales_.push_back(static_cast<float>(base * (0.6 + 0.35 * static_cast<double>(h))));
        v_head_scales_.push_back(static_cast<float>(base * (1.3 - 0.1 * static_cast<double>(h % 5))));
      }
      kv_.k_head_scales = TensorView(k_head_scales_.data(), DType::kF32, {H});
      kv_.v_head_scales = TensorView(v_head_scales_.data(), DType::kF32, {H});
      // The per-tensor scales must be ignored when per-head ones are given: make them wrong.
      kv_.k_scale = 1000.0f;
      kv_.v_scale = 1000.0f;
    }
  }
  free_pages_.resize(static_cast<std::size_t>(P));
  for (std::int64_t p = 0; p < P; ++p) free_pages_[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(p);
  std::shuffle(free_pages_.begin(), free_pages_.end(), rng.engine());
}

std::vector<std::int32_t> PagedCache::take_pages(std::int64_t n) {
  if (n > static_cast<std::int64_t>(free_pages_.size())) {
    throw std::invalid_argument("PagedCache: out of pages (" + std::to_string(n) + " wanted)");
  }
  std::vector<std::int32_t> pages(free_pages_.end() - n, free_pages_.end());
  free_pages_.resize(free_pages_.size() - static_cast<std::size_t>(n));
  return pages;
}

double PagedCache::scale(bool value, std::int64_t head) const {
  if (!is_fp8(spec_.dtype)) return 1.0;
  if (spec_.per_head_scales) {
    return (value ? v_head_scales_ : k_head_scales_)[static_cast<std::size_t>(head)];
  }
  return value ? kv_.v_scale : kv_.k_scale;
}

DenseKV PagedCache::random_tokens(std::int64_t len, Rng& rng) const {
  const std::int64_t H = spec_.num_kv_heads, D = spec_.head_dim;
  DenseKV t;
  t.len = len;
  for (auto [dst, value] : {std::pair{&t.k, false}, std::pair{&t.v, true}}) {
    dst->resize(static_cast<std::size_t>(len * H * D));
    for (std::int64_t i = 0; i < len * H * D; ++i) {
      double x;
      do x = rng.uniform(-1.0, 1.0);
      while (std::fabs(x) < 1e-3);
      (*dst)[static_cast<std::size_t>(i)] = quantise(x, spec_.dtype, scale(value, (i / D) % H));
    }
  }
  return t;
}

std::int64_t PagedCache::offset(bool value, std::int64_t page, std::int64_t slot,
                                std::int64_t head, std::int64_t dim) const {
  const std::int64_t S = spec_.page_size, H = spec_.num_kv_heads, D = spec_.head_dim;
  const std::int64_t page_elems = S * H * D;
  std::int64_t page_base = page * page_elems;
  if (spec_.stacked) page_base = page * 2 * page_elems + (value ? page_elems : 0);
  switch (spec_.layout) {
    case KVLayout::kNHD: return page_base + (slot * H + head) * D + dim;
    case KVLayout::kHND: return page_base + (head * S + slot) * D + dim;
    case KVLayout::kVllmSplit:
      if (value) return page_base + (head * D + dim) * S + slot;
      {
        const std::int64_t x = vllm_split_x(spec_.dtype);
        return page_base + ((head * (D / x) + dim / x) * S + slot) * x + dim % x;
      }
  }
  return 0;
}

std::byte* PagedCache::base(bool value) {
  return value && !spec_.stacked ? v_bytes_.data() : k_bytes_.data();
}
const std::byte* PagedCache::base(bool value) const {
  return value && !spec_.stacked ? v_bytes_.data() : k_bytes_.data();
}

void PagedCache::write(std::span<const std::int32_t> pages, const DenseKV& tokens) {
  const std::int64_t S = spec_.page_size, H = spec_.num_kv_heads, D = spec_.head_dim;
  if (static_cast<std::int64_t>(pages.size()) * S < tokens.len) {
    throw std::invalid_argument("PagedCache::write: not enough pages");
  }
  for (std::int64_t t = 0; t < tokens.len; ++t) {
    const std::int64_t page = pages[static_cast<std::size_t>(t / S)];
    for (std::int64_t h = 0; h < H; ++h) {
      for (std::int64_t d = 0; d < D; ++d) {
        const auto i = static_cast<std::size_t>((t * H + h) * D + d);
        store_from_float(base(false), spec_.dtype, offset(false, page, t % S, h, d),
                         static_cast<float>(tokens.k[i] / scale(false, h)));
        store_from_float(base(true), spec_.dtype, offset(true, page, t % S, h, d),
                         static_cast<float>(tokens.v[i] / scale(true, h)));
      }
    }
  }
}

double PagedCache::read(bool value, std::int64_t page, std::int64_t slot, std::int64_t head,
                        std::int64_t dim) const {
  return static_cast<double>(load_as_float(base(value), spec_.dtype,
                                           offset(value, page, slot, head, dim))) *
         scale(value, head);
}

std::vector<std::byte> PagedCache::snapshot() const {
  std::vector<std::byte> out(k_bytes_);
  out.insert(out.end(), v_bytes_.begin(), v_bytes_.end());
  return out;
}

// ---- HostTable ---------------------------------------------------------------------------

HostTable::HostTable(std::vector<std::vector<std::int32_t>> pages, std::vector<std::int64_t> lens,
                     std::int64_t page_size, TableFormat format, Rng& rng)
    : format_(format), lens_(std::move(lens)) {
  if (pages.size() != lens_.size()) throw std::invalid_argument("HostTable: rows mismatch");
  // Ids a sequence never uses: they must be ignored, never dereferenced.
  constexpr std::int32_t kGarbage[] = {-1, std::numeric_limits<std::int32_t>::max(), -7,
                                       1 << 30, std::numeric_limits<std::int32_t>::min()};
  auto garbage = [&] { return kGarbage[rng.integer(0, 4)]; };
  const auto rows = static_cast<std::int64_t>(lens_.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t need = (lens_[static_cast<std::size_t>(r)] + page_size - 1) / page_size;
    if (static_cast<std::int64_t>(pages[static_cast<std::size_t>(r)].size()) != need) {
      throw std::invalid_argument("HostTable: row " + std::to_string(r) + " has the wrong page count");
    }
    max_pages_ = std::max(max_pages_, need);
  }
  if (format == TableFormat::kBlockTable) {
    max_pages_ += 2;  // poisoned columns past every row's end
    block_table_.resize(static_cast<std::size_t>(rows * max_pages_));
    for (auto& id : block_table_) id = garbage();
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& row = pages[static_cast<std::size_t>(r)];
      std::copy(row.begin(), row.end(), block_table_.begin() + r * max_pages_);
      seq_lens_.push_back(static_cast<std::int32_t>(lens_[static_cast<std::size_t>(r)]));
    }
    return;
  }
  indptr_.push_back(0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto& row = pages[static_cast<std::size_t>(r)];
    indices_.insert(indices_.end(), row.begin(), row.end());
    indptr_.push_back(static_cast<std::int32_t>(indices_.size()));
    const std::int64_t len = lens_[static_cast<std::size_t>(r)];
    last_page_len_.push_back(row.empty() ? garbage()
                                         : static_cast<std::int32_t>(
                                               len - (static_cast<std::int64_t>(row.size()) - 1) * page_size));
  }
  for (int i = 0; i < 3; ++i) indices_.push_back(garbage());  // entries past indptr[num_rows]
}

PageTable HostTable::view() {
  const std::int64_t rows = num_rows();
  if (format_ == TableFormat::kBlockTable) {
    return BlockTable{TensorView(block_table_.data(), DType::kI32, {rows, max_pages_}),
                      TensorView(seq_lens_.data(), DType::kI32, {rows})};
  }
  return CsrPageTable{
      TensorView(indptr_.data(), DType::kI32, {rows + 1}),
      TensorView(indices_.data(), DType::kI32, {static_cast<std::int64_t>(indices_.size())}),
      TensorView(last_page_len_.data(), DType::kI32, {rows})};
}

// ---- the oracle --------------------------------------------------------------------------

void reference_sequence(std::span<const double> q, std::int64_t n_q, const DenseKV& kv,
                        std::int64_t num_q_heads, std::int64_t num_kv_heads,
                        std::int64_t head_dim, const ReferenceParams& params,
                        std::span<double> out, std::span<double> lse) {
  const std::int64_t D = head_dim, group = num_q_heads / num_kv_heads;
  std::vector<double> k(static_cast<std::size_t>(kv.len * D)), v(k.size());
  for (std::int64_t kh = 0; kh < num_kv_heads; ++kh) {
    for (std::int64_t t = 0; t < kv.len; ++t) {
      for (std::int64_t d = 0; d < D; ++d) {
        const auto src = static_cast<std::size_t>((t * num_kv_heads + kh) * D + d);
        k[static_cast<std::size_t>(t * D + d)] = kv.k[src];
        v[static_cast<std::size_t>(t * D + d)] = kv.v[src];
      }
    }
    for (std::int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      const auto hs = static_cast<std::size_t>(h);
      const double slope = params.alibi_slopes.empty() ? 0.0 : params.alibi_slopes[hs];
      const double sink = params.sinks.empty() ? -std::numeric_limits<double>::infinity()
                                               : static_cast<double>(params.sinks[hs]);
      for (std::int64_t i = 0; i < n_q; ++i) {
        const auto row = static_cast<std::size_t>((i * num_q_heads + h) * D);
        lse[static_cast<std::size_t>(i * num_q_heads + h)] = reference::attend(
            q.subspan(row, static_cast<std::size_t>(D)), k, v, kv.len, D, kv.len - n_q + i,
            params.scale, params.causal, params.window_left, params.soft_cap, slope, sink,
            out.subspan(row, static_cast<std::size_t>(D)));
      }
    }
  }
}

}  // namespace pagedattn::testing
