// pagedattn testing support: the one table of attention cases that drives the tests, the
// CLI's `verify` and the benchmarks, and the machinery to run a case against the
// double-precision dense reference.
//
// A case is built from random data (never zeros) with a fixed seed: dense K/V per sequence in
// double, written into a paged cache of the case's layout with shuffled page ids; every unused
// page and every unused page-table entry is poisoned (NaN in the cache, garbage ids in the table).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pagedattn/context.h"
#include "pagedattn/dtype.h"
#include "pagedattn/kv_cache.h"

namespace pagedattn::testing {

enum class Op : unsigned char { kDecode, kDecodeSplitK, kPrefill, kCascade };
enum class TableFormat : unsigned char { kBlockTable, kCsr };

struct AttentionCase {
  std::string name;
  Op op = Op::kDecode;
  std::vector<std::int64_t> kv_lens;   // per sequence
  std::vector<std::int64_t> q_lens;    // prefill: queries per sequence (<= kv_len); else unused
  std::int64_t shared_prefix = 0;      // cascade: leading tokens shared by all sequences
  std::int64_t page_size = 16;
  std::int64_t num_q_heads = 4, num_kv_heads = 1, head_dim = 64;
  DType q_dtype = DType::kF32;
  std::optional<DType> out_dtype;      // the output's dtype; q's where unset
  DType kv_dtype = DType::kF32;
  KVLayout layout = KVLayout::kNHD;
  TableFormat table = TableFormat::kBlockTable;
  bool stacked_kv = false;             // K and V as one [pages, 2, ...] tensor
  bool strided_q = false;              // q/out with padded token and head strides
  bool per_head_scales = false;        // fp8: per-head instead of per-tensor scales
  // variants
  bool causal = true;
  int window_left = -1;
  float soft_cap = 0.0f;
  bool alibi = false;
  bool sinks = false;
  bool with_lse = true;
  std::uint64_t seed = 1;

  DType output_dtype() const { return out_dtype.value_or(q_dtype); }
};

struct CaseResult {
  bool passed = false;
  double max_abs_error = 0.0;     // output, over all elements
  double max_lse_error = 0.0;
  double nmse = 0.0;              // normalised mean squared error of the output
  std::string message;            // first mismatch (index, got, expected) when failed
};

// The standard table (DESIGN.md §5, 13-15): every layout, both table formats, all dtypes,
// page sizes 1/3/16/32/128, head dims 64/80/128/256, group sizes 1/2/4/5/8, lengths 0, 1,
// page_size +- 1, ragged batches, every variant and op. `quick` keeps a representative subset.
std::vector<AttentionCase> standard_cases(bool quick = false);
// `count` random cases (ops, layouts, dtypes, page sizes, any head_dim that is a multiple of 8,
// group sizes, lengths, table formats, variants) from `seed`, sized like the table's.
std::vector<AttentionCase> random_cases(int count, std::uint64_t seed);

// Runs the case through the library on ctx (fast implementation unless ctx says otherwise)
// and compares with the dense double reference using the dtype's tolerance.
CaseResult run_case(const AttentionCase& c, const Context& ctx);

// One-line description: "decode nhd bf16/bf16 ps16 h32/8 d128 lens[...]".
std::string describe(const AttentionCase& c);

}  // namespace pagedattn::testing
