// The standard case table. Not a cross product: each group sweeps one axis (layout x dtype,
// page size x length, head_dim x group size, variants, prefill shapes, cascade) while the other
// axes rotate through their values, and a seeded random group covers the combinations between.
// Sizes stay small (lengths up to ~300, a few sequences) so that the full table runs in well
// under two minutes in a Release build, checking against a double-precision oracle.
#include <algorithm>
#include <array>
#include <utility>

#include "attention_case.h"
#include "paged_fixture.h"

namespace pagedattn::testing {

namespace {
constexpr std::array kLayouts = {KVLayout::kNHD, KVLayout::kHND, KVLayout::kVllmSplit};
constexpr std::array kKVTypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                 DType::kF8E5M2};
constexpr std::array kQTypes = {DType::kF32, DType::kF16, DType::kBF16};
constexpr std::array<std::int64_t, 5> kPageSizes = {1, 3, 16, 32, 128};
constexpr std::array<std::int64_t, 4> kHeadDims = {64, 80, 128, 256};
constexpr std::array<std::int64_t, 5> kGroups = {1, 2, 4, 5, 8};

template <class A>
auto pick(const A& values, std::size_t i) {
  return values[i % values.size()];
}

// Collects the cases. Cases marked `core` always run; of the others, the quick table keeps
// every sixth, so each group stays represented in a sanitizer build.
class Table {
 public:
  explicit Table(bool quick) : quick_(quick) {}

  void add(AttentionCase c, const char* group, bool core = false) {
    c.name = group;
    c.seed = ++seed_;
    // The vLLM split layout has distinct K and V shapes and cannot be stacked.
    if (c.layout == KVLayout::kVllmSplit) c.stacked_kv = false;
    if (!is_fp8(c.kv_dtype)) c.per_head_scales = false;
    const bool keep = core || !quick_ || (non_core_++ % 6 == 0);
    if (keep) cases_.push_back(std::move(c));
  }
  std::vector<AttentionCase> take() { return std::move(cases_); }

 private:
  bool quick_;
  std::uint64_t seed_ = 0;
  std::size_t non_core_ = 0;
  std::vector<AttentionCase> cases_;
};

// Rotates the axes a group does not sweep, from a counter.
void rotate_rest(AttentionCase& c, std::size_t i) {
  c.table = i % 2 ? TableFormat::kCsr : TableFormat::kBlockTable;
  c.stacked_kv = (i / 2) % 2 == 1;
  c.strided_q = i % 5 == 2;
  c.per_head_scales = (i / 3) % 2 == 1;
}

// A few queries for each sequence, cycling through full prefill, one, none and partial chunks.
std::vector<std::int64_t> q_lens_for(const std::vector<std::int64_t>& kv_lens, std::size_t i) {
  std::vector<std::int64_t> q;
  for (std::size_t s = 0; s < kv_lens.size(); ++s) {
    const std::int64_t kv = kv_lens[s];
    switch ((i + s) % 4) {
      case 0: q.push_back(kv); break;
      case 1: q.push_back(std::min<std::int64_t>(kv, 1)); break;
      case 2: q.push_back(0); break;
      default: q.push_back(std::min<std::int64_t>(kv, 1 + kv / 3)); break;
    }
  }
  return q;
}

void layout_dtype_group(Table& t) {
  std::size_t i = 0;
  for (KVLayout layout : kLayouts) {
    for (DType kv : kKVTypes) {
      for (Op op : {Op::kDecode, Op::kPrefill, Op::kDecodeSplitK, Op::kCascade}) {
        AttentionCase c;
        c.op = op;
        c.layout = layout;
        c.kv_dtype = kv;
        c.q_dtype = pick(kQTypes, i);
        c.page_size = pick(std::array<std::int64_t, 4>{16, 3, 32, 1}, i / 4);
        c.head_dim = pick(kHeadDims, i / 2);
        c.num_q_heads = i % 2 ? 5 : 8;
        c.num_kv_heads = i % 2 ? 1 : 2;
        c.kv_lens = {1, 54, 0, c.page_size + 1};
        if (op == Op::kPrefill) c.q_lens = q_lens_for(c.kv_lens, i);
        if (op == Op::kCascade) {
          c.shared_prefix = c.page_size + 2;
          c.kv_lens = {c.shared_prefix, c.shared_prefix + 40, c.shared_prefix + 1};
        }
        rotate_rest(c, i);
        // Decode and prefill of every layout x dtype always run; split-K and cascade rotate.
        t.add(c, "layout-dtype", op == Op::kDecode || op == Op::kPrefill);
        ++i;
      }
    }
  }
}

void page_size_group(Table& t) {
  std::size_t i = 0;
  for (std::int64_t ps : kPageSizes) {
    std::vector<std::int64_t> lens = {0, 1, ps - 1, ps, ps + 1, 54, 97};
    std::sort(lens.begin(), lens.end());
    lens.erase(std::unique(lens.begin(), lens.end()), lens.end());
    for (Op op : {Op::kDecode, Op::kDecodeSplitK, Op::kPrefill, Op::kCascade}) {
      AttentionCase c;
      c.op = op;
      c.page_size = ps;
      c.layout = pick(kLayouts, i);
      c.kv_dtype = pick(kKVTypes, i);
      c.q_dtype = pick(kQTypes, i / 2);
      c.head_dim = pick(std::array<std::int64_t, 3>{64, 128, 80}, i);
      c.num_q_heads = 4;
      c.num_kv_heads = 2;
      c.kv_lens = lens;
      if (op == Op::kPrefill) c.q_lens = q_lens_for(lens, i);
      if (op == Op::kCascade) {
        // Prefix lengths that end inside a page, on a page boundary and just past it.
        c.shared_prefix = pick(std::array<std::int64_t, 3>{ps + 1, ps, std::max<std::int64_t>(ps - 1, 1)}, i);
        c.kv_lens.clear();
        for (std::int64_t extra : {std::int64_t{0}, std::int64_t{1}, ps - 1, ps, ps + 1}) {
          c.kv_lens.push_back(c.shared_prefix + std::max<std::int64_t>(extra, 0));
        }
      }
      rotate_rest(c, i);
      t.add(c, "page-size", op == Op::kDecode && (ps == 1 || ps == 16));
      ++i;
    }
  }
}

void head_group(Table& t) {
  std::size_t i = 0;
  for (std::int64_t d : kHeadDims) {
    for (std::int64_t g : kGroups) {
      for (Op op : {Op::kDecode, Op::kPrefill}) {
        AttentionCase c;
        c.op = i % 4 == 2 ? Op::kDecodeSplitK : op;
        c.head_dim = d;
        c.num_kv_heads = 1 + static_cast<std::int64_t>(i % 2);
        c.num_q_heads = g * c.num_kv_heads;
        c.layout = pick(kLayouts, i / 2);
        c.kv_dtype = pick(kKVTypes, i / 3);
        c.q_dtype = pick(kQTypes, i);
        c.page_size = pick(std::array<std::int64_t, 3>{16, 32, 3}, i / 2);
        c.kv_lens = op == Op::kPrefill ? std::vector<std::int64_t>{40, 25}
                                       : std::vector<std::int64_t>{33, 70, 5};
        if (op == Op::kPrefill) c.q_lens = {40, 9};
        rotate_rest(c, i);
        t.add(c, "heads", (d == 128 || d == 80) && op == Op::kDecode && g == 5);
        ++i;
      }
    }
  }
}

void variant_group(Table& t) {
  struct Variant {
    int window = -1;
    float cap = 0;
    bool alibi = false, sinks = false, lse = true, causal = true;
  };
  const Variant variants[] = {
      {.window = 0},
      {.window = 5},
      {.window = 31},
      {.cap = 2.0f},
      {.cap = 30.0f},
      {.alibi = true},
      {.sinks = true},
      {.lse = false},
      {.window = 7, .alibi = true},
      {.window = 12, .cap = 3.0f, .sinks = true},
      {.causal = false},
      {.window = 9, .causal = false},
      {.window = 20, .cap = 5.0f, .alibi = true, .sinks = true, .lse = false},
  };
  std::size_t i = 0;
  for (const Variant& v : variants) {
    for (Op op : {Op::kDecode, Op::kDecodeSplitK, Op::kPrefill, Op::kCascade}) {
      if (!v.causal && op != Op::kPrefill) continue;  // causality is a prefill option only
      AttentionCase c;
      c.op = op;
      c.window_left = v.window;
      c.soft_cap = v.cap;
      c.alibi = v.alibi;
      c.sinks = v.sinks;
      c.with_lse = v.lse;
      c.causal = v.causal;
      c.layout = pick(kLayouts, i);
      c.kv_dtype = pick(kKVTypes, i / 2);
      c.q_dtype = pick(kQTypes, i / 3);
      c.page_size = pick(std::array<std::int64_t, 4>{16, 1, 32, 3}, i);
      c.head_dim = pick(std::array<std::int64_t, 3>{64, 128, 80}, i / 2);
      c.num_q_heads = 8;
      c.num_kv_heads = i % 2 ? 2 : 8;
      c.kv_lens = {97, 1, 0, 54};
      if (op == Op::kPrefill) c.q_lens = {30, 1, 0, 54};
      if (op == Op::kCascade) {
        c.shared_prefix = 37;
        c.kv_lens = {37, 60, 130, 38};
      }
      rotate_rest(c, i);
      t.add(c, "variant", i % 4 == 0);
      ++i;
    }
  }
}

void prefill_group(Table& t) {
  struct Shape {
    std::vector<std::int64_t> kv, q;
  };
  const Shape shapes[] = {
      {{300}, {300}},                    // one long full prefill
      {{0, 1, 97, 54}, {0, 1, 97, 10}},  // empty, single token, full and chunked
      {{200, 150}, {64, 150}},           // a chunk after cached tokens
      {{17, 17, 17}, {1, 2, 3}},         // speculative multi-token append
      {{129, 5, 64}, {129, 0, 1}},
      {{33}, {0}},                        // no queries at all
  };
  std::size_t i = 0;
  for (const Shape& s : shapes) {
    for (bool causal : {true, false}) {
      AttentionCase c;
      c.op = Op::kPrefill;
      c.kv_lens = s.kv;
      c.q_lens = s.q;
      c.causal = causal;
      c.layout = pick(kLayouts, i);
      c.kv_dtype = pick(kKVTypes, i);
      c.q_dtype = pick(kQTypes, i / 2);
      c.page_size = pick(std::array<std::int64_t, 4>{16, 3, 128, 32}, i);
      c.head_dim = pick(std::array<std::int64_t, 3>{64, 80, 128}, i);
      c.num_q_heads = 4;
      c.num_kv_heads = i % 3 == 0 ? 4 : 1;
      rotate_rest(c, i);
      t.add(c, "prefill", causal && i < 4);
      ++i;
    }
  }
}

void cascade_group(Table& t) {
  std::size_t i = 0;
  for (std::int64_t prefix : {0, 1, 15, 16, 17, 54, 97}) {
    for (int v = 0; v < 3; ++v) {
      AttentionCase c;
      c.op = Op::kCascade;
      c.shared_prefix = prefix;
      c.kv_lens = {prefix, prefix + 1, prefix + 31, prefix + 16};
      c.page_size = pick(std::array<std::int64_t, 3>{16, 1, 32}, i);
      c.layout = pick(kLayouts, i);
      c.kv_dtype = pick(kKVTypes, i / 2);
      c.q_dtype = pick(kQTypes, i);
      c.head_dim = pick(kHeadDims, i);
      c.num_q_heads = pick(std::array<std::int64_t, 3>{8, 5, 4}, i);
      c.num_kv_heads = c.num_q_heads == 8 ? 2 : 1;
      // 0: the grouped (shared-row) path; 1: positional variants force per-sequence levels;
      // 2: sinks and soft-cap, which the grouped path must still honour.
      if (v == 1) {
        c.window_left = 40;
        c.alibi = true;
      } else if (v == 2) {
        c.sinks = true;
        c.soft_cap = 4.0f;
      }
      rotate_rest(c, i);
      t.add(c, "cascade", prefix == 17 && v != 1);
      ++i;
    }
  }
}

// Random combinations, bounded so that no case costs much more than the others. any_head_dim:
// every multiple of 8 up to 256 instead of the table's four head dims.
void random_group(Table& t, int count, std::uint64_t seed = 20240611, bool any_head_dim = false) {
  Rng rng(seed);
  for (int n = 0; n < count; ++n) {
    AttentionCase c;
    c.op = static_cast<Op>(rng.integer(0, 3));
    c.layout = pick(kLayouts, static_cast<std::size_t>(rng.integer(0, 2)));
    c.kv_dtype = pick(kKVTypes, static_cast<std::size_t>(rng.integer(0, 4)));
    c.q_dtype = pick(kQTypes, static_cast<std::size_t>(rng.integer(0, 2)));
    c.page_size = pick(kPageSizes, static_cast<std::size_t>(rng.integer(0, 4)));
    c.head_dim = pick(kHeadDims, static_cast<std::size_t>(rng.integer(0, 3)));
    if (any_head_dim) {
      c.head_dim = 8 * rng.integer(1, 32);
      // vLLM's split K holds x = 16 bytes of dims per chunk: fp8 head dims are multiples of 16.
      if (c.layout == KVLayout::kVllmSplit && is_fp8(c.kv_dtype) && c.head_dim % 16 != 0) c.head_dim += 8;
    }
    c.num_kv_heads = rng.integer(1, 3);
    c.num_q_heads = c.num_kv_heads * pick(kGroups, static_cast<std::size_t>(rng.integer(0, 4)));
    const std::int64_t ps = c.page_size;
    const std::int64_t special[] = {0, 1, std::max<std::int64_t>(ps - 1, 0), ps, ps + 1, 54, 97};
    const auto num_seqs = rng.integer(1, 4);
    for (std::int64_t s = 0; s < num_seqs; ++s) {
      c.kv_lens.push_back(rng.integer(0, 2) == 0 ? rng.integer(0, 300) : special[rng.integer(0, 6)]);
    }
    if (c.op == Op::kPrefill) {
      for (std::int64_t kv : c.kv_lens) {
        const std::int64_t r = rng.integer(0, 3);
        c.q_lens.push_back(r == 0 ? kv : r == 1 ? std::min<std::int64_t>(kv, 1) : rng.integer(0, kv));
      }
    }
    if (c.op == Op::kCascade) {
      c.shared_prefix = rng.integer(0, *std::min_element(c.kv_lens.begin(), c.kv_lens.end()));
    }
    // Keep the oracle's work (queries x keys x heads x dims) small.
    std::int64_t work = 0;
    for (std::size_t s = 0; s < c.kv_lens.size(); ++s) {
      work += (c.op == Op::kPrefill ? c.q_lens[s] : 1) * c.kv_lens[s];
    }
    if (work * c.num_q_heads * c.head_dim > 6'000'000) {
      c.num_kv_heads = 1;
      c.num_q_heads = pick(kGroups, static_cast<std::size_t>(n));
      if (c.op == Op::kPrefill) {
        for (std::size_t s = 0; s < c.q_lens.size(); ++s) c.q_lens[s] = std::min<std::int64_t>(c.q_lens[s], 24);
      }
    }
    c.table = rng.integer(0, 1) ? TableFormat::kCsr : TableFormat::kBlockTable;
    c.stacked_kv = rng.integer(0, 1) == 1;
    c.strided_q = rng.integer(0, 3) == 0;
    c.per_head_scales = rng.integer(0, 1) == 1;
    c.causal = rng.integer(0, 4) != 0;
    c.window_left = rng.integer(0, 4) == 0 ? static_cast<int>(rng.integer(0, 64)) : -1;
    c.soft_cap = rng.integer(0, 4) == 0 ? static_cast<float>(rng.integer(1, 30)) : 0.0f;
    c.alibi = rng.integer(0, 4) == 0;
    c.sinks = rng.integer(0, 4) == 0;
    c.with_lse = rng.integer(0, 5) != 0;
    t.add(c, "random");
  }
}

// One variant per case in turn: none, a window of `window` keys, soft-capping, ALiBi; sinks on
// every third case.
void rotate_variants(AttentionCase& c, std::size_t i, std::int64_t window) {
  c.window_left = i % 4 == 1 ? window : -1;
  c.soft_cap = i % 4 == 2 ? 10.0f : 0.0f;
  c.alibi = i % 4 == 3;
  c.sinks = i % 3 == 0;
}

// bf16 q and KV at head_dim d, group size g, with KV heads, layout and page size from i.
AttentionCase bf16_case(std::int64_t d, std::int64_t g, std::size_t i, std::int64_t kv_heads,
                        std::int64_t page_size) {
  AttentionCase c;
  c.head_dim = d;
  c.num_kv_heads = kv_heads;
  c.num_q_heads = g * kv_heads;
  c.layout = i % 2 ? KVLayout::kHND : KVLayout::kNHD;
  c.kv_dtype = DType::kBF16;
  c.q_dtype = DType::kBF16;
  c.page_size = page_size;
  return c;
}

// bf16 q/KV/out decode, which has its own dot-product kernels on CPUs with AVX512-BF16: every
// head dim x group size (4, 2 and 1-head tiles, padded 32-dim chunks), blocks with odd and
// non-multiple-of-4 key counts, both dim-contiguous layouts, and the score variants.
void bf16_decode_group(Table& t) {
  std::size_t i = 0;
  for (std::int64_t d : kHeadDims) {
    for (std::int64_t g : {1, 4, 5, 8}) {
      AttentionCase c = bf16_case(d, g, i, 1 + static_cast<std::int64_t>(i % 3),
                                  pick(std::array<std::int64_t, 3>{16, 3, 1}, i));
      c.op = i % 3 == 2 ? Op::kDecodeSplitK : i % 5 == 4 ? Op::kCascade : Op::kDecode;
      c.kv_lens = {1, 67, 130, 6};
      if (c.op == Op::kCascade) {
        c.shared_prefix = 5;
        c.kv_lens = {6, 72, 135, 11};
      }
      rotate_variants(c, i, 40);
      rotate_rest(c, i);
      t.add(c, "bf16-decode", true);
      ++i;
    }
  }
}

// bf16 q and KV prefill: the AVX512-BF16 products, and on CPUs with AMX both products on tiles
// (head_dim a multiple of 32). Tiles of 16 to 64 rows (queries x heads of a group), key blocks
// cut short (lengths that leave 1-31 keys in the last block of 32).
void bf16_prefill_group(Table& t) {
  std::size_t i = 0;
  for (std::int64_t d : kHeadDims) {
    for (std::int64_t g : {1, 4, 8}) {
      AttentionCase c = bf16_case(d, g, i, 1 + static_cast<std::int64_t>(i % 2),
                                  pick(std::array<std::int64_t, 3>{16, 3, 32}, i));
      c.op = Op::kPrefill;
      c.kv_lens = {70, 1, 45, 100};
      c.q_lens = {70, 1, 9, 17};
      c.causal = i % 5 != 4;
      rotate_variants(c, i, 30);
      rotate_rest(c, i);
      t.add(c, "bf16-prefill", true);
      ++i;
    }
  }
}

// Outputs of another dtype than q's, through every op: f32 outputs of 16-bit queries (the
// output rows' f32 stores), 16-bit outputs of f32 queries, and bf16 to f16; KV dtypes rotating.
void output_dtype_group(Table& t) {
  std::size_t i = 0;
  constexpr std::array<std::pair<DType, DType>, 4> kPairs = {
      std::pair{DType::kBF16, DType::kF32}, std::pair{DType::kF16, DType::kF32},
      std::pair{DType::kF32, DType::kBF16}, std::pair{DType::kBF16, DType::kF16}};
  for (const auto& [q, out] : kPairs) {
    for (Op op : {Op::kDecode, Op::kDecodeSplitK, Op::kPrefill, Op::kCascade}) {
      AttentionCase c;
      c.op = op;
      c.q_dtype = q;
      c.out_dtype = out;
      c.kv_dtype = pick(std::array{DType::kBF16, q, DType::kF8E4M3}, i);
      c.layout = pick(kLayouts, i);
      c.head_dim = pick(std::array<std::int64_t, 2>{128, 64}, i);
      c.num_q_heads = 8;
      c.num_kv_heads = 2;
      c.kv_lens = {1, 17, 130, 0};
      if (op == Op::kPrefill) c.q_lens = q_lens_for(c.kv_lens, i);
      if (op == Op::kCascade) {
        c.shared_prefix = 20;
        c.kv_lens = {21, 37, 150, 20};
      }
      rotate_rest(c, i);
      t.add(c, "output-dtype", true);
      ++i;
    }
  }
}

}  // namespace

std::vector<AttentionCase> standard_cases(bool quick) {
  Table t(quick);
  layout_dtype_group(t);
  page_size_group(t);
  head_group(t);
  variant_group(t);
  prefill_group(t);
  cascade_group(t);
  random_group(t, 120);
  bf16_decode_group(t);
  bf16_prefill_group(t);
  output_dtype_group(t);
  return t.take();
}

std::vector<AttentionCase> random_cases(int count, std::uint64_t seed) {
  Table t(false);
  random_group(t, count, seed, true);
  return t.take();
}

}  // namespace pagedattn::testing
