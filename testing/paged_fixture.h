// Random paged KV caches and their expected attention results, for tests.
//
// The cache is filled by this file's own scatter code (not pagedattn::append_kv), from its own
// reading of the layouts in kv_cache.h, so a bug in the library's cache writes or in its view of
// a layout cannot cancel out. Every byte the test does not write is 0xFF, which reads as NaN in
// every float dtype (f32, f16, bf16, fp8 e4m3 and e5m2): a kernel that lets an unused slot, an
// unused page or the padding of a strided tensor reach its result produces NaN.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "attention_case.h"
#include "compare.h"
#include "pagedattn/attention_params.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/page_table.h"
#include "pagedattn/tensor.h"

namespace pagedattn::testing {

// Deterministic random numbers for a seed (the same on every platform for the integer draws;
// the real draws go through std::uniform_real_distribution over a fixed engine).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  double uniform(double lo, double hi);
  std::int64_t integer(std::int64_t lo, std::int64_t hi);  // inclusive bounds
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

// A host tensor that owns its bytes. Bytes not covered by an element (the padding of a strided
// layout) start as 0xFF and are checked by padding_intact().
struct HostTensor {
  std::vector<std::byte> storage;
  TensorView view;  // points into `storage`, which moves with it but must not be copied

  HostTensor() = default;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  // A tensor of `shape` whose dimensions are padded by `pad` elements each (0: contiguous).
  static HostTensor make(DType dtype, std::initializer_list<std::int64_t> shape,
                         std::int64_t pad = 0);
  // Fills every element with a value in [lo, hi] rounded to the dtype; returns the stored
  // values in row-major logical order.
  std::vector<double> fill_random(Rng& rng, double lo, double hi);
  // Sets every element from `values` (row-major logical order), rounding to the dtype.
  void fill(std::span<const double> values);
  // True when no byte outside the elements has changed from 0xFF.
  bool padding_intact() const;
};

// Keys and values of consecutive tokens, [len, num_kv_heads, head_dim], holding exactly the
// values the cache stores (already quantised and dequantised).
struct DenseKV {
  std::int64_t len = 0;
  std::vector<double> k, v;

  // The tokens of `a` followed by those of `b`.
  static DenseKV concat(const DenseKV& a, const DenseKV& b);
};

struct CacheSpec {
  KVLayout layout = KVLayout::kNHD;
  DType dtype = DType::kF32;
  std::int64_t num_pages = 0, page_size = 16, num_kv_heads = 1, head_dim = 64;
  bool stacked = false;          // K and V in one [num_pages, 2, ...] tensor (NHD/HND only)
  bool per_head_scales = false;  // fp8: per-head scales instead of per-tensor ones
};

class PagedCache {
 public:
  // All pages poisoned; page ids handed out by take_pages() in shuffled order.
  PagedCache(const CacheSpec& spec, Rng& rng);
  PagedCache(const PagedCache&) = delete;
  PagedCache& operator=(const PagedCache&) = delete;

  const PagedKV& kv() const { return kv_; }
  const CacheSpec& spec() const { return spec_; }
  std::vector<std::int32_t> take_pages(std::int64_t n);
  // Random tokens with values in [-1, 1] (never exactly zero), rounded to what this cache stores.
  DenseKV random_tokens(std::int64_t len, Rng& rng) const;
  // Writes token t of `tokens` to slot t % page_size of pages[t / page_size].
  void write(std::span<const std::int32_t> pages, const DenseKV& tokens);
  // The dequantised value stored for (page, slot, head, dim) of K (value = false) or V.
  double read(bool value, std::int64_t page, std::int64_t slot, std::int64_t head,
              std::int64_t dim) const;
  // A copy of every byte of the cache (K then V), to check that an op left it unchanged.
  std::vector<std::byte> snapshot() const;
  // The scale that turns a stored K (value = false) or V code of `head` into its value.
  double scale(bool value, std::int64_t head) const;

 private:
  std::int64_t offset(bool value, std::int64_t page, std::int64_t slot, std::int64_t head,
                      std::int64_t dim) const;
  std::byte* base(bool value);
  const std::byte* base(bool value) const;

  CacheSpec spec_;
  std::vector<std::byte> k_bytes_, v_bytes_;  // v_bytes_ empty when stacked
  std::vector<float> k_head_scales_, v_head_scales_;
  std::vector<std::int32_t> free_pages_;
  PagedKV kv_;
};

// A page table in either format over rows (pages[r] must hold ceil(lens[r] / page_size) ids).
// Unused block-table entries and CSR entries past indptr[num_rows] hold garbage ids (-1,
// negative and huge values); last_page_len of an empty row is garbage too.
class HostTable {
 public:
  HostTable(std::vector<std::vector<std::int32_t>> pages, std::vector<std::int64_t> lens,
            std::int64_t page_size, TableFormat format, Rng& rng);
  // Borrows this object's storage.
  PageTable view();
  std::int64_t num_rows() const { return static_cast<std::int64_t>(lens_.size()); }

 private:
  TableFormat format_;
  std::vector<std::int64_t> lens_;
  std::int64_t max_pages_ = 0;
  std::vector<std::int32_t> block_table_, seq_lens_;
  std::vector<std::int32_t> indptr_, indices_, last_page_len_;
};

// What the oracle needs beyond the data: the resolved scale and the variant, per query head.
struct ReferenceParams {
  double scale = 0.0;
  bool causal = true;
  int window_left = -1;
  double soft_cap = 0.0;
  std::vector<float> alibi_slopes;  // empty or [num_q_heads]
  std::vector<float> sinks;         // empty or [num_q_heads]
};

// Expected attention of one sequence: q [n_q, num_q_heads, head_dim] are the last n_q positions
// of `kv`; writes out [n_q, num_q_heads, head_dim] and lse [n_q, num_q_heads] through
// pagedattn::reference::attend.
void reference_sequence(std::span<const double> q, std::int64_t n_q, const DenseKV& kv,
                        std::int64_t num_q_heads, std::int64_t num_kv_heads,
                        std::int64_t head_dim, const ReferenceParams& params,
                        std::span<double> out, std::span<double> lse);

// The tensors one call of a case's op takes: the fixture's host ones, or device mirrors of them.
struct OpViews {
  TensorView q, out, lse, qo_indptr, seq_to_row;
  PagedKV kv;
  std::vector<PageTable> tables;  // one, or one per cascade level
  AttentionParams params;
};

// One AttentionCase made concrete: cache, tables, queries, outputs and expected results.
class CaseFixture {
 public:
  explicit CaseFixture(const AttentionCase& c);
  CaseFixture(const CaseFixture&) = delete;
  CaseFixture& operator=(const CaseFixture&) = delete;

  // Runs the case's op on ctx into the (poisoned) output buffers; may throw pagedattn::Error.
  // On a GPU it runs over device mirrors of the host data (case_on_gpu.cpp) and copies the
  // outputs back.
  void run(const Context& ctx);

  std::vector<double> output() const { return read_values(out_.view); }
  std::vector<double> lse() const;
  const std::vector<double>& expected_output() const { return expected_out_; }
  const std::vector<double>& expected_lse() const { return expected_lse_; }
  // Raw bytes of the output and LSE, for bit-exact determinism checks.
  std::vector<std::byte> result_bytes() const;
  bool padding_intact() const { return out_.padding_intact(); }
  bool cache_intact() const { return gpu_cache_intact_ && cache_->snapshot() == cache_before_; }

 private:
  OpViews host_views();
  // The op on ctx over `v`; `host` supplies the host copies the CUDA ops take in their options.
  void run_op(const Context& ctx, const OpViews& v, const OpViews& host) const;
  void run_on_gpu(const Context& ctx);

  AttentionCase c_;
  Rng rng_;
  std::unique_ptr<PagedCache> cache_;
  std::vector<HostTable> tables_;         // one, or one per cascade level
  std::vector<std::int32_t> seq_to_row_;  // cascade: the shared level's mapping
  std::vector<std::int32_t> qo_indptr_;
  HostTensor q_, out_, lse_;
  std::vector<float> alibi_, sinks_;
  AttentionParams params_;
  std::vector<double> expected_out_, expected_lse_;
  std::vector<std::byte> cache_before_;
  bool gpu_cache_intact_ = true;  // the device mirror of the cache, after a GPU run
};

}  // namespace pagedattn::testing
