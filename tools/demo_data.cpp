// The demo's synthetic workload: requests, tokens, and K/V / query values derived from hashes,
// plus the KV pool with a read-back check of its contents.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "demo.h"
#include "pagedattn/error.h"

namespace pagedattn::cli::demo {
namespace {

constexpr TokenId kVocab = 32000;

// SplitMix64's finaliser: a cheap, well-mixed 64-bit hash. Everything random in the demo is a
// hash of what it belongs to, so any value can be regenerated later for checking.
constexpr std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr std::uint64_t mix3(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  return mix(mix(mix(a) ^ b) ^ c);
}

// Uniform in [-1, 1) from the top 24 bits (exactly representable in float).
inline float unit_value(std::uint64_t h) {
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// A small deterministic generator for the request mix (std distributions differ by library).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(mix(seed)) {}
  std::uint64_t next() { return mix(state_++); }
  // Uniform integer in [lo, hi].
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

constexpr std::uint64_t kKeyTag = 0x4b;    // 'K'
constexpr std::uint64_t kValueTag = 0x56;  // 'V'
constexpr std::uint64_t kQueryTag = 0x51;  // 'Q'

// x after a round trip through the cache's dtype (fp8 scales are 1 in the demo).
float rounded(float x, DType t) {
  alignas(8) std::byte tmp[8];
  store_from_float(tmp, t, 0, x);
  return load_as_float(tmp, t, 0);
}

}  // namespace

std::vector<Request> make_requests(const DemoOptions& o) {
  Rng rng(o.seed);
  // The common system prompt: long enough to span several pages, short enough to leave room
  // for each request's own text.
  const std::int64_t system_len = o.max_prompt >= 2 ? std::max<std::int64_t>(1, o.max_prompt * 3 / 8) : 0;
  std::vector<TokenId> system_prompt(static_cast<std::size_t>(system_len));
  for (TokenId& t : system_prompt) t = static_cast<TokenId>(rng.uniform(0, kVocab - 1));

  std::vector<Request> out;
  out.reserve(static_cast<std::size_t>(o.requests));
  for (int r = 0; r < o.requests; ++r) {
    Request req;
    req.uid = r;
    req.shared_prefix = system_len > 0 && rng.unit() < o.shared_prefix_share;
    std::int64_t own_len = 0;
    if (req.shared_prefix) {
      req.prompt = system_prompt;
      own_len = rng.uniform(1, o.max_prompt - system_len);
    } else {
      own_len = rng.uniform(std::max<std::int64_t>(1, o.max_prompt / 8), o.max_prompt);
    }
    for (std::int64_t i = 0; i < own_len; ++i) {
      req.prompt.push_back(static_cast<TokenId>(rng.uniform(0, kVocab - 1)));
    }
    req.max_output = rng.uniform(std::max<std::int64_t>(1, o.max_output / 4), o.max_output);
    req.fork = req.max_output >= 2 && rng.unit() < o.fork_share;
    out.push_back(std::move(req));
  }
  return out;
}

TokenId sample_token(int uid, std::int64_t pos) {
  return static_cast<TokenId>(mix3(static_cast<std::uint64_t>(uid), static_cast<std::uint64_t>(pos),
                                   0x5a) % kVocab);
}

void token_kv(TokenId token, std::int64_t pos, const Geometry& g, float* k, float* v) {
  const std::int64_t n = g.num_kv_heads * g.head_dim;
  const std::uint64_t base_k = mix3(static_cast<std::uint64_t>(token), static_cast<std::uint64_t>(pos), kKeyTag);
  const std::uint64_t base_v = mix3(static_cast<std::uint64_t>(token), static_cast<std::uint64_t>(pos), kValueTag);
  for (std::int64_t i = 0; i < n; ++i) {
    k[i] = unit_value(mix(base_k + static_cast<std::uint64_t>(i)));
    v[i] = unit_value(mix(base_v + static_cast<std::uint64_t>(i)));
  }
}

void query_values(int uid, std::int64_t pos, const Geometry& g, float* q) {
  const std::int64_t n = g.num_q_heads * g.head_dim;
  const std::uint64_t base = mix3(static_cast<std::uint64_t>(uid), static_cast<std::uint64_t>(pos), kQueryTag);
  // Twice the key range gives logits of standard deviation ~0.7 after the 1/sqrt(d) scale:
  // attention neither uniform nor one-hot.
  for (std::int64_t i = 0; i < n; ++i) q[i] = 2.0f * unit_value(mix(base + static_cast<std::uint64_t>(i)));
}

double output_tolerance(DType q_dtype, DType kv_dtype) {
  auto tol = [](DType t) {
    switch (t) {
      case DType::kF32: return 1e-4;
      case DType::kF16: return 2e-3;
      default: return 1.6e-2;  // bf16, and fp8 which kernels may widen through bf16
    }
  };
  return std::max(tol(q_dtype), tol(kv_dtype));
}

// ---- KVPool -----------------------------------------------------------------------------------

void KVPool::FreeDeleter::operator()(void* p) const { std::free(p); }

KVPool::KVPool(const Geometry& g) : g_(g) {
  KVCacheSpec& spec = spec_;
  spec.layout = g.layout;
  spec.dtype = g.kv_dtype;
  spec.num_pages = g.num_pages;
  spec.page_size = g.page_size;
  spec.num_kv_heads = g.num_kv_heads;
  spec.head_dim = g.head_dim;
  bytes_ = static_cast<std::size_t>(spec.bytes_per_tensor());
  const std::size_t padded = (bytes_ + 63) / 64 * 64;
  k_mem_.reset(static_cast<std::byte*>(std::aligned_alloc(64, padded)));
  v_mem_.reset(static_cast<std::byte*>(std::aligned_alloc(64, padded)));
  if (!k_mem_ || !v_mem_) throw std::bad_alloc();

  // Poison: every element NaN until written.
  alignas(8) std::byte nan_bytes[8];
  store_from_float(nan_bytes, g.kv_dtype, 0, std::numeric_limits<float>::quiet_NaN());
  const std::size_t esize = dtype_size(g.kv_dtype);
  for (std::size_t off = 0; off + esize <= padded; off += esize) {
    std::memcpy(k_mem_.get() + off, nan_bytes, esize);
    std::memcpy(v_mem_.get() + off, nan_bytes, esize);
  }
  kv_ = spec.make_views(k_mem_.get(), v_mem_.get());
}

float KVPool::read(const TensorView& t, bool is_k, std::int64_t page, std::int64_t offset,
                   std::int64_t head, std::int64_t dim) const {
  void* p = nullptr;
  switch (g_.layout) {
    case KVLayout::kNHD: p = t.element_ptr({page, offset, head, dim}); break;
    case KVLayout::kHND: p = t.element_ptr({page, head, offset, dim}); break;
    case KVLayout::kVllmSplit:
      if (is_k) {
        const std::int64_t x = vllm_split_x(g_.kv_dtype);
        p = t.element_ptr({page, head, dim / x, offset, dim % x});
      } else {
        p = t.element_ptr({page, head, dim, offset});
      }
      break;
  }
  return load_as_float(p, g_.kv_dtype, 0);
}

bool KVPool::holds(std::int64_t slot, TokenId token, std::int64_t pos) const {
  thread_local std::vector<float> k, v;
  const std::int64_t n = g_.num_kv_heads * g_.head_dim;
  k.resize(static_cast<std::size_t>(n));
  v.resize(static_cast<std::size_t>(n));
  token_kv(token, pos, g_, k.data(), v.data());
  const std::int64_t page = slot / g_.page_size;
  const std::int64_t offset = slot % g_.page_size;
  for (std::int64_t h = 0; h < g_.num_kv_heads; ++h) {
    for (std::int64_t d = 0; d < g_.head_dim; ++d) {
      const auto i = static_cast<std::size_t>(h * g_.head_dim + d);
      // NaN (never written) compares unequal, as it should.
      if (read(kv_.k, true, page, offset, h, d) != rounded(k[i], g_.kv_dtype)) return false;
      if (read(kv_.v, false, page, offset, h, d) != rounded(v[i], g_.kv_dtype)) return false;
    }
  }
  return true;
}

}  // namespace pagedattn::cli::demo
