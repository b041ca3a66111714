// `pagedattn demo`: continuous batching of synthetic requests through the KV cache manager and
// the attention ops, with every attention output checked against the reference.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pagedattn/kv_cache.h"
#include "pagedattn/kv_cache_manager.h"

namespace pagedattn::cli::demo {

struct DemoOptions {
  std::string device = "cpu";
  int threads = 0;
  int requests = 48;
  std::uint64_t seed = 42;
  std::int64_t page_size = 16;
  std::int64_t num_pages = 256;
  std::int64_t token_budget = 256;  // query tokens per step (decodes + prefill chunks)
  std::string kv_dtype = "bf16";
  std::string q_dtype = "bf16";
  std::string layout = "nhd";
  std::string page_table = "alternate";  // block | csr | alternate (by step)
  std::string heads = "8/2";
  std::int64_t head_dim = 64;
  std::int64_t max_prompt = 320;
  std::int64_t max_output = 96;
  double shared_prefix_share = 0.5;
  double fork_share = 0.25;
  int verify_every = 1;  // 0: never compare with the reference
  bool no_prefix_caching = false;
};

// Shapes and types of one run, resolved from the options.
struct Geometry {
  std::int64_t num_q_heads = 8, num_kv_heads = 2, head_dim = 64;
  std::int64_t page_size = 16, num_pages = 256;
  DType q_dtype = DType::kBF16;  // also the output dtype
  DType kv_dtype = DType::kBF16;
  KVLayout layout = KVLayout::kNHD;
};

// A request as the client sends it. The prompt's tokens (and hence the K/V) are what the prefix
// cache matches on; `shared_prefix` requests begin with the common system prompt.
struct Request {
  int uid = 0;
  std::vector<TokenId> prompt;
  std::int64_t max_output = 1;
  bool shared_prefix = false;
  bool fork = false;  // sampled n = 2: forked once its prompt is done
};

struct DemoStats {
  int requests = 0;
  int sequences_planned = 0;  // requests + planned forks
  int sequences_done = 0;
  std::int64_t prompt_tokens = 0;     // of the requests as sent
  std::int64_t generated_tokens = 0;  // sampled tokens of finished sequences
  std::int64_t prefill_tokens_computed = 0;  // prompt tokens attended (prefix hits skip theirs)
  std::int64_t prefix_tokens_rewritten = 0;  // hit tokens whose K/V was not written yet
  std::int64_t steps = 0;
  std::int64_t preemptions = 0;
  std::int64_t forks = 0;
  std::int64_t cow_copies = 0;
  std::int64_t peak_pages_used = 0;
  // Time averages over the steps of KV slots: held by the pages in use, reserved by a contiguous
  // allocator (each live sequence its max length), and logically stored (live sequences' lengths).
  double sum_paged_slots = 0, sum_contiguous_slots = 0, sum_logical_tokens = 0;
  double sum_fragmentation_pct = 0;
  double prefix_hit_rate = 0;
  std::int64_t prefix_pages_hit = 0, prefix_pages_queried = 0;
  // Attention (fast implementation only).
  double attention_seconds = 0;
  std::int64_t attention_query_tokens = 0;
  double attention_kv_bytes = 0;
  std::int64_t attention_calls = 0;
  // Verification.
  std::int64_t outputs_total = 0;     // query tokens whose attention output was produced
  std::int64_t outputs_verified = 0;  // ... and compared with the reference
  std::int64_t output_mismatches = 0;
  std::int64_t kv_tokens_checked = 0;  // cache contents read back against the synthetic K/V
  std::int64_t kv_mismatches = 0;
  std::int64_t integrity_checks = 0;
  std::int64_t device_pool_checks = 0;  // --device cuda: the GPU's pool compared with the host's
  double max_abs_error = 0;
  double wall_seconds = 0;
};

// ---- synthetic data (demo_data.cpp) -----------------------------------------------------------

std::vector<Request> make_requests(const DemoOptions& o);
// The token a sequence samples after position `pos` (a hash: reproducible, differs per uid).
TokenId sample_token(int uid, std::int64_t pos);
// K and V of token `token` at position `pos`, [num_kv_heads * head_dim] each. They depend only on
// (token, position), so a prefix-cache hit must find exactly what the sequence would write.
void token_kv(TokenId token, std::int64_t pos, const Geometry& g, float* k, float* v);
// The query of sequence `uid` at position `pos`, [num_q_heads * head_dim].
void query_values(int uid, std::int64_t pos, const Geometry& g, float* q);

// Absolute plus relative tolerance of an output compared with the reference.
double output_tolerance(DType q_dtype, DType kv_dtype);

// The KV pool in host memory (64-byte aligned), poisoned with NaN so that a read of a slot
// nobody wrote shows up in the outputs.
class KVPool {
 public:
  explicit KVPool(const Geometry& g);
  const PagedKV& views() const { return kv_; }
  const KVCacheSpec& spec() const { return spec_; }
  // The K and V tensors' memory, tensor_bytes() each (for a device twin of the pool).
  const std::byte* k_bytes() const { return k_mem_.get(); }
  const std::byte* v_bytes() const { return v_mem_.get(); }
  std::size_t tensor_bytes() const { return bytes_; }
  // Does the cache hold token `token`'s K/V at `pos` in slot `slot`? (exact, after the cache
  // dtype's rounding)
  bool holds(std::int64_t slot, TokenId token, std::int64_t pos) const;

 private:
  float read(const TensorView& t, bool is_k, std::int64_t page, std::int64_t offset,
             std::int64_t head, std::int64_t dim) const;

  struct FreeDeleter {
    void operator()(void* p) const;
  };
  Geometry g_;
  KVCacheSpec spec_;
  std::size_t bytes_ = 0;
  std::unique_ptr<std::byte, FreeDeleter> k_mem_, v_mem_;
  PagedKV kv_;
};

// ---- the serving loop (demo_engine.cpp) --------------------------------------------------------

// Runs every request to completion; `on_step` is called after each step with a status line.
DemoStats run_serving_loop(const DemoOptions& o, const Geometry& g,
                           const std::function<void(const std::string&)>& on_step);

}  // namespace pagedattn::cli::demo
