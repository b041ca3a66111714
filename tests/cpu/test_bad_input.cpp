// Bad input (DESIGN.md §3, §5.7): every op rejects each kind of bad argument with
// pagedattn::Error of the right code, a message naming the argument, and no write to any
// output or cache buffer. One valid problem is built per row; the row breaks one thing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "paged_fixture.h"
#include "pagedattn/config.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn::testing {
namespace {

constexpr std::int64_t kPages = 8, kPageSize = 4, kKVHeads = 2, kQHeads = 4, kDim = 16;
constexpr Device kCuda = Device::cuda(0);
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class T>
std::span<std::byte> bytes_of(std::vector<T>& v) {
  return std::as_writable_bytes(std::span(v));
}

// Owns every buffer of a small valid problem for every op. Never moved: views point into it.
struct Problem {
  Rng rng{7};
  PagedCache cache{CacheSpec{KVLayout::kNHD, DType::kF16, kPages, kPageSize, kKVHeads, kDim},
                   rng};
  // Two sequences of 6 and 5 tokens over pages [p0 p1] and [p2 p3]; p4 holds a shared prefix;
  // p5..p7 stay free (copy destinations).
  std::vector<std::int32_t> pages = cache.take_pages(kPages);
  std::vector<std::int32_t> block_table = {pages[0], pages[1], -1, pages[2], pages[3], -1};
  std::vector<std::int32_t> seq_lens = {6, 5};
  std::vector<std::int32_t> indptr = {0, 2, 4}, indices = {pages[0], pages[1], pages[2], pages[3]},
                            last_page_len = {2, 1};
  std::vector<std::int32_t> prefix_table = {pages[4]}, prefix_len = {3}, seq_to_row = {0, 0};
  std::vector<float> q = std::vector<float>(2 * kQHeads * kDim, 0.5f), out = q,
                     lse = std::vector<float>(2 * kQHeads, 0.0f);
  std::vector<std::int32_t> qo_indptr = {0, 3, 5};
  std::vector<float> q5 = std::vector<float>(5 * kQHeads * kDim, 0.25f), out5 = q5,
                     lse5 = std::vector<float>(5 * kQHeads, 0.0f);
  std::vector<float> k_new = std::vector<float>(3 * kKVHeads * kDim, 1.0f), v_new = k_new;
  std::vector<std::int64_t> slots = {0, 5, 9};
  std::vector<std::int32_t> block_mapping = {pages[0], pages[5], pages[1], pages[6]};
  std::vector<float> v_a = std::vector<float>(3 * kQHeads * kDim, 1.0f), v_b = v_a, v_out = v_a;
  std::vector<float> lse_a = std::vector<float>(3 * kQHeads, 0.5f), lse_b = lse_a, lse_out = lse_a;
  std::vector<float> states = std::vector<float>(3 * 2 * kQHeads * kDim, 1.0f),
                     state_lse = std::vector<float>(3 * 2 * kQHeads, 0.1f);
  std::vector<float> alibi = std::vector<float>(kQHeads, 0.1f), sinks = alibi;
  std::vector<float> scratch = std::vector<float>(8192, 0.75f);  // for views of other shapes

  Problem() {
    for (std::int64_t s = 0; s < 5; ++s) {
      cache.write(std::span(pages).subspan(static_cast<std::size_t>(s), 1),
                  cache.random_tokens(kPageSize, rng));
    }
  }

  // Every byte any op could write (and every input, which must not change either).
  std::vector<std::byte> snapshot() {
    std::vector<std::byte> all = cache.snapshot();
    for (std::span<std::byte> b :
         {bytes_of(block_table), bytes_of(seq_lens), bytes_of(indptr), bytes_of(indices),
          bytes_of(last_page_len), bytes_of(q), bytes_of(out), bytes_of(lse), bytes_of(q5),
          bytes_of(out5), bytes_of(lse5), bytes_of(k_new), bytes_of(v_new), bytes_of(slots),
          bytes_of(block_mapping), bytes_of(v_a), bytes_of(v_b), bytes_of(v_out), bytes_of(lse_a),
          bytes_of(lse_b), bytes_of(lse_out), bytes_of(states), bytes_of(state_lse),
          bytes_of(scratch), bytes_of(qo_indptr), bytes_of(seq_to_row)}) {
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  }
  CsrPageTable csr() {
    return {TensorView(indptr.data(), DType::kI32, {3}), TensorView(indices.data(), DType::kI32, {4}),
            TensorView(last_page_len.data(), DType::kI32, {2})};
  }
};

// The arguments of every op, valid until a row breaks one.
struct Args {
  Context ctx = Context::cpu();
  PagedKV cache;
  TensorView q, out, lse, q5, out5, lse5, qo_indptr;
  PageTable table;
  AttentionParams params;
  DecodeOptions options;
  std::vector<CascadeLevel> levels;
  TensorView k_new, v_new, slots, block_mapping;
  TensorView v_a, lse_a, v_b, lse_b, v_out, lse_out, states, state_lse, merged, merged_lse;

  explicit Args(Problem& s) : cache(s.cache.kv()) {
    q = TensorView(s.q.data(), DType::kF32, {2, kQHeads, kDim});
    out = TensorView(s.out.data(), DType::kF32, {2, kQHeads, kDim});
    lse = TensorView(s.lse.data(), DType::kF32, {2, kQHeads});
    q5 = TensorView(s.q5.data(), DType::kF32, {5, kQHeads, kDim});
    out5 = TensorView(s.out5.data(), DType::kF32, {5, kQHeads, kDim});
    lse5 = TensorView(s.lse5.data(), DType::kF32, {5, kQHeads});
    qo_indptr = TensorView(s.qo_indptr.data(), DType::kI32, {3});
    table = BlockTable{TensorView(s.block_table.data(), DType::kI32, {2, 3}),
                       TensorView(s.seq_lens.data(), DType::kI32, {2})};
    params.alibi_slopes = TensorView(s.alibi.data(), DType::kF32, {kQHeads});
    params.sinks = TensorView(s.sinks.data(), DType::kF32, {kQHeads});
    levels = {{BlockTable{TensorView(s.prefix_table.data(), DType::kI32, {1, 1}),
                          TensorView(s.prefix_len.data(), DType::kI32, {1})},
               TensorView(s.seq_to_row.data(), DType::kI32, {2})},
              {table, TensorView{}}};
    k_new = TensorView(s.k_new.data(), DType::kF32, {3, kKVHeads, kDim});
    v_new = TensorView(s.v_new.data(), DType::kF32, {3, kKVHeads, kDim});
    slots = TensorView(s.slots.data(), DType::kI64, {3});
    block_mapping = TensorView(s.block_mapping.data(), DType::kI32, {2, 2});
    v_a = TensorView(s.v_a.data(), DType::kF32, {3, kQHeads, kDim});
    v_b = TensorView(s.v_b.data(), DType::kF32, {3, kQHeads, kDim});
    v_out = TensorView(s.v_out.data(), DType::kF32, {3, kQHeads, kDim});
    lse_a = TensorView(s.lse_a.data(), DType::kF32, {3, kQHeads});
    lse_b = TensorView(s.lse_b.data(), DType::kF32, {3, kQHeads});
    lse_out = TensorView(s.lse_out.data(), DType::kF32, {3, kQHeads});
    states = TensorView(s.states.data(), DType::kF32, {3, 2, kQHeads, kDim});
    state_lse = TensorView(s.state_lse.data(), DType::kF32, {3, 2, kQHeads});
    merged = v_out;
    merged_lse = lse_out;
  }
};

enum class Call { kAppend, kCopy, kDecode, kPrefill, kCascade, kMerge, kMergeStates };

void call(Call op, const Args& a) {
  switch (op) {
    case Call::kAppend: return append_kv(a.ctx, a.cache, a.k_new, a.v_new, a.slots);
    case Call::kCopy: return copy_blocks(a.ctx, a.cache, a.block_mapping);
    case Call::kDecode: return decode(a.ctx, a.q, a.cache, a.table, a.params, a.out, a.lse, a.options);
    case Call::kPrefill:
      return prefill(a.ctx, a.q5, a.qo_indptr, a.cache, a.table, a.params, a.out5, a.lse5);
    case Call::kCascade: return cascade_decode(a.ctx, a.q, a.cache, a.levels, a.params, a.out, a.lse);
    case Call::kMerge: return merge_state(a.ctx, a.v_a, a.lse_a, a.v_b, a.lse_b, a.v_out, a.lse_out);
    case Call::kMergeStates: return merge_states(a.ctx, a.states, a.state_lse, a.merged, a.merged_lse);
  }
}

using Mutation = std::function<void(Args&, Problem&)>;

struct BadInput {
  const char* name;
  std::vector<Call> ops;     // each op is tried with the same breakage
  ErrorCode code;
  std::vector<std::string> message;  // substrings of what(): the argument's name and the fault
  Mutation mutate;
};
void PrintTo(const BadInput& row, std::ostream* os) { *os << row.name; }

// A view of the same memory, shape and strides as `t` with another dtype or device.
TensorView remake(const TensorView& t, DType dtype, Device device = Device::cpu()) {
  const auto n = [&](int d) { return t.size(d); };
  const auto st = [&](int d) { return t.stride(d); };
  switch (t.rank()) {
    case 1: return TensorView(t.data(), dtype, {n(0)}, {st(0)}, device);
    case 2: return TensorView(t.data(), dtype, {n(0), n(1)}, {st(0), st(1)}, device);
    case 3: return TensorView(t.data(), dtype, {n(0), n(1), n(2)}, {st(0), st(1), st(2)}, device);
    default:
      return TensorView(t.data(), dtype, {n(0), n(1), n(2), n(3)}, {st(0), st(1), st(2), st(3)},
                        device);
  }
}
TensorView on_cuda(const TensorView& t) { return remake(t, t.dtype(), kCuda); }
// Runs `fn`, which must throw pagedattn::Error with `code` and a what() that mentions every
// string in `parts`.
template <class Fn, class Parts>
void expect_error(const Fn& fn, const std::string& name, ErrorCode code, const Parts& parts) {
  try {
    fn();
    ADD_FAILURE() << name << ": no error was raised";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "what() = \"" << e.what() << "\" does not mention \"" << part << "\"";
    }
  }
}

// Rank 1 or 3 views with a null pointer, or with a pointer off the element alignment.
TensorView null_data(const TensorView& t) {
  return t.rank() == 1 ? TensorView(nullptr, t.dtype(), {t.size(0)})
                       : TensorView(nullptr, t.dtype(), {t.size(0), t.size(1), t.size(2)});
}
TensorView misaligned(const TensorView& t) {
  return TensorView(static_cast<std::byte*>(t.data()) + 1, t.dtype(),
                    {t.size(0), t.size(1), t.size(2)});
}
// An f16 NHD cache of head_dim `d` over the scratch buffer.
PagedKV cache_with_head_dim(Problem& s, std::int64_t d) {
  PagedKV kv;
  kv.k = TensorView(s.scratch.data(), DType::kF16, {2, kPageSize, kKVHeads, d});
  kv.v = TensorView(s.scratch.data() + 4096, DType::kF16, {2, kPageSize, kKVHeads, d});
  return kv;
}

const std::vector<Call> kAttention = {Call::kDecode, Call::kPrefill, Call::kCascade};
const std::vector<Call> kCacheUsers = {Call::kAppend, Call::kCopy, Call::kDecode, Call::kPrefill,
                                       Call::kCascade};
constexpr ErrorCode kInvalid = ErrorCode::kInvalidArgument;
constexpr ErrorCode kUnsupported = ErrorCode::kUnsupported;

std::vector<BadInput> bad_inputs();  // the table, at the end of this file

class BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTest, ThrowsAndWritesNothing) {
  const BadInput& row = GetParam();
  for (Call op : row.ops) {
    SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)));
    auto setup = std::make_unique<Problem>();
    Args args(*setup);
    row.mutate(args, *setup);
    const std::vector<std::byte> before = setup->snapshot();
    expect_error([&] { call(op, args); }, row.name, row.code, row.message);
    EXPECT_TRUE(setup->snapshot() == before) << row.name << ": a buffer changed";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, BadInputTest, ::testing::ValuesIn(bad_inputs()),
                         [](const ::testing::TestParamInfo<BadInput>& info) {
                           return std::string(info.param.name);
                         });

// The unbroken arguments are accepted by every op, so each row fails for its own breakage.
TEST(BadInputBaseline, ValidArgumentsAreAccepted) {
  for (Call op : {Call::kAppend, Call::kCopy, Call::kDecode, Call::kPrefill, Call::kCascade,
                  Call::kMerge, Call::kMergeStates}) {
    auto setup = std::make_unique<Problem>();
    Args args(*setup);
    EXPECT_NO_THROW(call(op, args)) << "op " << static_cast<int>(op);
  }
  auto setup = std::make_unique<Problem>();
  Args args(*setup);
  args.table = setup->csr();
  args.levels[1].table = args.table;
  for (Call op : kAttention) EXPECT_NO_THROW(call(op, args)) << "csr, op " << static_cast<int>(op);
}

// Memory that is shared without any element in common is accepted: out == q (in place), q and
// out as interleaved halves of one buffer's rows, and a stacked cache ([pages, 2, ...]) whose K
// and V alternate page by page.
TEST(BadInputBaseline, SharedButDisjointMemoryIsAccepted) {
  for (Call op : kAttention) {
    for (DecodeVariant variant : {DecodeVariant::kOnePass, DecodeVariant::kSplitK}) {
      auto apart = std::make_unique<Problem>();
      Args apart_args(*apart);
      apart_args.options.variant = variant;
      apart_args.options.partition_size = variant == DecodeVariant::kSplitK ? kPageSize : 0;
      call(op, apart_args);
      auto in_place = std::make_unique<Problem>();
      Args args(*in_place);
      args.options = apart_args.options;
      args.out = args.q;
      args.out5 = args.q5;
      EXPECT_NO_THROW(call(op, args)) << "in place, op " << static_cast<int>(op);
      // Each query's output replaces it only once every read of it is done.
      EXPECT_EQ(op == Call::kPrefill ? in_place->q5 : in_place->q, op == Call::kPrefill ? apart->out5 : apart->out)
          << "in place, op " << static_cast<int>(op);
    }
  }
  for (Call op : kAttention) {
    auto setup = std::make_unique<Problem>();
    Args args(*setup);
    float* rows = setup->scratch.data();  // [token][q or out][head][dim]
    for (auto [q, out] : {std::pair{&Args::q, &Args::out}, std::pair{&Args::q5, &Args::out5}}) {
      const std::int64_t n = (args.*q).size(0);
      args.*q = TensorView(rows, DType::kF32, {n, kQHeads, kDim}, {2 * kQHeads * kDim, kDim, 1});
      args.*out = TensorView(rows + kQHeads * kDim, DType::kF32, {n, kQHeads, kDim}, {2 * kQHeads * kDim, kDim, 1});
    }
    EXPECT_NO_THROW(call(op, args)) << "interleaved q/out, op " << static_cast<int>(op);
  }
  for (Call op : kCacheUsers) {
    auto setup = std::make_unique<Problem>();
    Args args(*setup);
    const TensorView stacked(setup->scratch.data(), DType::kF16, {kPages, 2, kPageSize, kKVHeads, kDim});
    args.cache.k = stacked.select(1, 0);
    args.cache.v = stacked.select(1, 1);
    EXPECT_NO_THROW(call(op, args)) << "stacked cache, op " << static_cast<int>(op);
  }
}

}  // namespace
}  // namespace pagedattn::testing

namespace pagedattn::testing {
namespace {

// Applies `f` to q and to q5 (the prefill query), and likewise for out / lse, so that one row
// breaks the same argument of decode, prefill and cascade_decode.
template <class F>
Mutation both(TensorView Args::*a, TensorView Args::*b, F f) {
  return [=](Args& args, Problem& s) {
    args.*a = f(args.*a, s);
    args.*b = f(args.*b, s);
  };
}
Mutation on_q(std::function<TensorView(const TensorView&, Problem&)> f) { return both(&Args::q, &Args::q5, f); }
Mutation on_out(std::function<TensorView(const TensorView&, Problem&)> f) { return both(&Args::out, &Args::out5, f); }
Mutation on_lse(std::function<TensorView(const TensorView&, Problem&)> f) { return both(&Args::lse, &Args::lse5, f); }
// Sets the sequences' page table of decode, prefill and the cascade's last level.
void set_table(Args& a, const PageTable& t) {
  a.table = t;
  a.levels[1].table = t;
}
Mutation on_csr(std::function<void(Problem&)> f) {
  return [=](Args& a, Problem& s) {
    f(s);
    set_table(a, s.csr());
  };
}
TensorView tokens_of(const TensorView& t, std::int64_t n) {
  return TensorView(t.data(), t.dtype(), {n, t.size(1), t.size(2)});
}

const std::vector<Call> kAllOps = {Call::kAppend, Call::kCopy,  Call::kDecode,     Call::kPrefill,
                                   Call::kCascade, Call::kMerge, Call::kMergeStates};
const std::vector<Call> kTableUsers = kAttention;

std::vector<BadInput> bad_inputs() {
  using A = Args;
  using S = Problem;
  std::vector<BadInput> rows = {
      // ---- the context and the cache, shared by every op that reads the cache ----
      {"NegativeThreadCount", kAllOps, kInvalid, {"ctx.num_threads"}, [](A& a, S&) { a.ctx.num_threads = -1; }},
      {"CacheWrongDtype", kCacheUsers, kInvalid, {"cache.k has dtype i32"},
       [](A& a, S&) { a.cache.k = remake(a.cache.k, DType::kI32); }},
      {"CacheKVDtypesDiffer", kCacheUsers, kInvalid, {"cache.k has dtype f16 but cache.v has bf16"},
       [](A& a, S&) { a.cache.v = remake(a.cache.v, DType::kBF16); }},
      {"CacheWrongRank", kCacheUsers, kInvalid, {"cache.k has rank 3"},
       [](A& a, S&) { a.cache.k = a.cache.k.select(0, 0); }},
      {"CacheVShapeDiffers", kCacheUsers, kInvalid, {"cache.v dimension 2"},
       [](A& a, S&) { a.cache.v = a.cache.v.slice(2, 0, 1); }},
      {"CacheOnOtherDevice", kCacheUsers, kInvalid, {"cache.k is on cuda:0", "cpu"},
       [](A& a, S&) { a.cache.k = remake(a.cache.k, a.cache.k.dtype(), kCuda); }},
      {"CacheNullPointer", kCacheUsers, kInvalid, {"cache.v has", "null pointer"},
       [](A& a, S&) { a.cache.v = TensorView(nullptr, DType::kF16, {kPages, kPageSize, kKVHeads, kDim}); }},
      {"CacheMisaligned", kCacheUsers, kInvalid, {"cache.k is not aligned"},
       [](A& a, S&) {
         a.cache.k = TensorView(static_cast<std::byte*>(a.cache.k.data()) + 1, DType::kF16,
                                {kPages - 1, kPageSize, kKVHeads, kDim});
       }},
      {"HeadDim12", kCacheUsers, kUnsupported, {"head_dim 12"},
       [](A& a, S& s) { a.cache = cache_with_head_dim(s, 12); }},
      {"HeadDim264", kCacheUsers, kUnsupported, {"head_dim 264"},
       [](A& a, S& s) { a.cache = cache_with_head_dim(s, 264); }},
      {"Fp8ScaleNaN", kCacheUsers, kInvalid, {"cache.k_scale"},
       [](A& a, S&) {
         a.cache.k = remake(a.cache.k, DType::kF8E4M3);
         a.cache.v = remake(a.cache.v, DType::kF8E4M3);
         a.cache.k_scale = kNaN;
       }},
      {"Fp8ScaleZero", kCacheUsers, kInvalid, {"cache.v_scale"},
       [](A& a, S&) {
         a.cache.k = remake(a.cache.k, DType::kF8E5M2);
         a.cache.v = remake(a.cache.v, DType::kF8E5M2);
         a.cache.v_scale = 0.0f;
       }},
      {"Fp8HeadScalesWrongLength", kCacheUsers, kInvalid, {"cache.k_head_scales dimension 0"},
       [](A& a, S& s) {
         a.cache.k = remake(a.cache.k, DType::kF8E4M3);
         a.cache.v = remake(a.cache.v, DType::kF8E4M3);
         a.cache.k_head_scales = TensorView(s.scratch.data(), DType::kF32, {kKVHeads + 1});
       }},
      {"Fp8HeadScaleZero", kCacheUsers, kInvalid, {"cache.k_head_scales[1] must be finite and > 0"},
       [](A& a, S& s) {
         a.cache.k = remake(a.cache.k, DType::kF8E4M3);
         a.cache.v = remake(a.cache.v, DType::kF8E4M3);
         s.scratch[1] = 0.0f;
         a.cache.k_head_scales = TensorView(s.scratch.data(), DType::kF32, {kKVHeads});
       }},
      {"Fp8HeadScaleNaN", kCacheUsers, kInvalid, {"cache.v_head_scales[0] must be finite and > 0"},
       [](A& a, S& s) {
         a.cache.k = remake(a.cache.k, DType::kF8E5M2);
         a.cache.v = remake(a.cache.v, DType::kF8E5M2);
         s.scratch[8] = kNaN;
         a.cache.v_head_scales = TensorView(s.scratch.data() + 8, DType::kF32, {kKVHeads});
       }},
      {"CacheKAndVSameMemory", kCacheUsers, kInvalid, {"cache.k and cache.v overlap in memory"},
       [](A& a, S&) { a.cache.v = a.cache.k; }},
      {"CacheVInsideK", kCacheUsers, kInvalid, {"cache.k and cache.v overlap in memory"},
       [](A& a, S&) {  // V starts one page into K's memory: K's pages 1.. are V's pages 0..
         a.cache.v = TensorView(static_cast<std::byte*>(a.cache.k.data()) + kPageSize * kKVHeads * kDim * 2,
                                DType::kF16, {kPages - 1, kPageSize, kKVHeads, kDim});
         a.cache.k = a.cache.k.slice(0, 0, kPages - 1);
       }},
      {"PageSizeBeyondI32", kCacheUsers, kInvalid, {"page_size is 2147483648"},
       [](A& a, S& s) {  // never read: the view only has to describe the geometry
         a.cache.k = TensorView(s.scratch.data(), DType::kF16, {1, std::int64_t{1} << 31, kKVHeads, kDim});
         a.cache.v = TensorView(s.scratch.data() + 4096, DType::kF16, {1, std::int64_t{1} << 31, kKVHeads, kDim});
       }},
      // Inputs inside the cache that append_kv / copy_blocks write.
      {"AppendRowsInCache", {Call::kAppend}, kInvalid, {"k overlaps cache.k (which the op writes) in memory"},
       [](A& a, S& s) { a.k_new = TensorView(s.cache.kv().k.data(), DType::kF32, {3, kKVHeads, kDim}); }},
      {"AppendSlotsInCache", {Call::kAppend}, kInvalid, {"slot_mapping overlaps cache.v (which the op writes) in memory"},
       [](A& a, S& s) { a.slots = TensorView(s.cache.kv().v.data(), DType::kI64, {3}); }},
      {"CopyMappingInCache", {Call::kCopy}, kInvalid, {"block_mapping overlaps cache.k (which the op writes) in memory"},
       [](A& a, S& s) { a.block_mapping = TensorView(s.cache.kv().k.data(), DType::kI32, {2, 2}); }},
      {"CacheNegativeStride", kCacheUsers, kInvalid, {"cache.v has a negative stride in dimension 0"},
       [](A& a, S&) {  // pages in reverse order: the last page first
         const TensorView& v = a.cache.v;
         a.cache.v = TensorView(static_cast<std::byte*>(v.data()) + (kPages - 1) * v.stride(0) * 2, DType::kF16,
                                {kPages, kPageSize, kKVHeads, kDim}, {-v.stride(0), v.stride(1), v.stride(2), 1});
       }},
      {"CachePagesOverlap", kCacheUsers, kInvalid, {"cache.k addresses some elements twice"},
       [](A& a, S&) {  // a page stride of one token row: page p + 1 starts at page p's second row
         a.cache.k = TensorView(a.cache.k.data(), DType::kF16, {kPages, kPageSize, kKVHeads, kDim},
                                {kKVHeads * kDim, kKVHeads * kDim, kDim, 1});
       }},
      {"VllmWrongChunk", kCacheUsers, kInvalid, {"cache.k (vllm layout) last dimension is 4"},
       [](A& a, S& s) {
         a.cache.layout = KVLayout::kVllmSplit;
         a.cache.k = TensorView(s.scratch.data(), DType::kF16, {kPages, kKVHeads, 4, kPageSize, 4});
         a.cache.v = TensorView(s.scratch.data() + 4096, DType::kF16, {kPages, kKVHeads, kDim, kPageSize});
       }},
      // ---- queries, outputs, LSE ----
      {"QWrongDtype", kAttention, kInvalid, {"q has dtype i32"}, on_q([](const TensorView& t, S&) { return remake(t, DType::kI32); })},
      {"QFp8", kAttention, kInvalid, {"q has dtype fp8_e4m3"}, on_q([](const TensorView& t, S&) { return remake(t, DType::kF8E4M3); })},
      {"QWrongRank", kAttention, kInvalid, {"q has rank 2"},
       on_q([](const TensorView& t, S&) { return TensorView(t.data(), t.dtype(), {t.size(0), kQHeads * kDim}); })},
      {"HeadsDoNotDivide", kAttention, kInvalid, {"num_q_heads 3", "num_kv_heads 2"},
       on_q([](const TensorView& t, S&) { return TensorView(t.data(), t.dtype(), {t.size(0), 3, kDim}); })},
      {"QHeadDimDiffers", kAttention, kInvalid, {"q dimension 2 (head_dim) is 8"},
       on_q([](const TensorView& t, S&) { return TensorView(t.data(), t.dtype(), {t.size(0), kQHeads, 8}); })},
      {"QNullPointer", kAttention, kInvalid, {"q has", "null pointer"}, on_q([](const TensorView& t, S&) { return null_data(t); })},
      {"QMisaligned", kAttention, kInvalid, {"q is not aligned"}, on_q([](const TensorView& t, S&) { return misaligned(t); })},
      {"QOnOtherDevice", kAttention, kInvalid, {"q is on cuda:0"}, on_q([](const TensorView& t, S&) { return on_cuda(t); })},
      {"QHeadDimNotContiguous", kAttention, kInvalid, {"q must be contiguous along head_dim"},
       on_q([](const TensorView& t, S& s) {
         return TensorView(s.scratch.data(), t.dtype(), {t.size(0), kQHeads, kDim}, {128, 32, 2});
       })},
      {"OutWrongShape", kAttention, kInvalid, {"out dimension 1 (num_q_heads) is 2"},
       on_out([](const TensorView& t, S&) { return TensorView(t.data(), t.dtype(), {t.size(0), 2, kDim}); })},
      {"OutWrongDtype", kAttention, kInvalid, {"out has dtype i32"}, on_out([](const TensorView& t, S&) { return remake(t, DType::kI32); })},
      {"OutOnOtherDevice", kAttention, kInvalid, {"out is on cuda:0"}, on_out([](const TensorView& t, S&) { return on_cuda(t); })},
      {"OutNullPointer", kAttention, kInvalid, {"out has", "null pointer"}, on_out([](const TensorView& t, S&) { return null_data(t); })},
      {"OutRowsAlias", kAttention, kInvalid, {"out addresses some elements twice"},
       on_out([](const TensorView& t, S&) {  // token stride 0: every token's output in one place
         return TensorView(t.data(), t.dtype(), {t.size(0), t.size(1), t.size(2)}, {0, t.stride(1), 1});
       })},
      {"OutOverlapsQ", kAttention, kInvalid, {"out overlaps q in memory"},
       [](A& a, S& s) {  // out one head behind q in the same buffer: writing it would clobber q
         for (auto [q, out] : {std::pair{&A::q, &A::out}, std::pair{&A::q5, &A::out5}}) {
           const TensorView& t = a.*q;
           a.*q = TensorView(s.scratch.data(), t.dtype(), {t.size(0), t.size(1), t.size(2)});
           a.*out = TensorView(s.scratch.data() + kDim, t.dtype(), {t.size(0), t.size(1), t.size(2)});
         }
       }},
      {"LseOverOut", kAttention, kInvalid, {"lse overlaps out in memory"},
       [](A& a, S&) {
         a.lse = TensorView(a.out.data(), DType::kF32, {a.lse.size(0), a.lse.size(1)});
         a.lse5 = TensorView(a.out5.data(), DType::kF32, {a.lse5.size(0), a.lse5.size(1)});
       }},
      // Outputs over memory the op reads while it writes them: the cache, the page table, a
      // parameter, qo_indptr.
      {"OutOverCacheK", kAttention, kInvalid, {"out overlaps cache.k in memory"},
       on_out([](const TensorView& t, S& s) {
         return TensorView(s.cache.kv().k.data(), t.dtype(), {t.size(0), t.size(1), t.size(2)});
       })},
      {"OutOverBlockTable", kAttention, kInvalid, {"out overlaps", "table.block_table in memory"},
       [](A& a, S& s) {  // the table moved into the scratch buffer, out over it (nothing else)
         auto* ids = reinterpret_cast<std::int32_t*>(s.scratch.data() + 1024);
         std::copy(s.block_table.begin(), s.block_table.end(), ids);
         set_table(a, BlockTable{TensorView(ids, DType::kI32, {2, 3}), TensorView(s.seq_lens.data(), DType::kI32, {2})});
         a.out = TensorView(ids, DType::kF32, {2, kQHeads, kDim});
         a.out5 = TensorView(ids, DType::kF32, {5, kQHeads, kDim});
       }},
      {"LseOverSinks", kAttention, kInvalid, {"lse overlaps params.sinks in memory"},
       [](A& a, S& s) {  // the sinks moved into the scratch buffer, lse over them
         float* sinks = s.scratch.data() + 1024;
         std::copy(s.sinks.begin(), s.sinks.end(), sinks);
         a.params.sinks = TensorView(sinks, DType::kF32, {kQHeads});
         a.lse = TensorView(sinks, DType::kF32, {2, kQHeads});
         a.lse5 = TensorView(sinks, DType::kF32, {5, kQHeads});
       }},
      {"OutOverQoIndptr", {Call::kPrefill}, kInvalid, {"out overlaps qo_indptr in memory"},
       [](A& a, S& s) {
         auto* indptr = reinterpret_cast<std::int32_t*>(s.scratch.data() + 1024);
         std::copy(s.qo_indptr.begin(), s.qo_indptr.end(), indptr);
         a.qo_indptr = TensorView(indptr, DType::kI32, {3});
         a.out5 = TensorView(indptr, DType::kF32, {5, kQHeads, kDim});
       }},
      // A cascade names the level whose table or row map an output lies over.
      {"OutOverLevelCsrIndices", {Call::kCascade}, kInvalid, {"out overlaps levels[1].table.indices in memory"},
       [](A& a, S& s) {  // the last level's CSR page ids moved into the scratch buffer, out over them
         auto* ids = reinterpret_cast<std::int32_t*>(s.scratch.data() + 1024);
         std::copy(s.indices.begin(), s.indices.end(), ids);
         a.levels[1].table = CsrPageTable{TensorView(s.indptr.data(), DType::kI32, {3}), TensorView(ids, DType::kI32, {4}),
                                          TensorView(s.last_page_len.data(), DType::kI32, {2})};
         a.out = TensorView(ids, DType::kF32, {2, kQHeads, kDim});
       }},
      {"LseOverLevelRowMap", {Call::kCascade}, kInvalid, {"lse overlaps levels[0].seq_to_row in memory"},
       [](A& a, S& s) {
         auto* rows = reinterpret_cast<std::int32_t*>(s.scratch.data() + 1024);
         std::copy(s.seq_to_row.begin(), s.seq_to_row.end(), rows);
         a.levels[0].seq_to_row = TensorView(rows, DType::kI32, {2});
         a.lse = TensorView(rows, DType::kF32, {2, kQHeads});
       }},
      {"LseWrongShape", kAttention, kInvalid, {"lse dimension 1 (num_q_heads) is 2"},
       on_lse([](const TensorView& t, S&) { return TensorView(t.data(), t.dtype(), {t.size(0), 2}); })},
      {"LseWrongDtype", kAttention, kInvalid, {"lse has dtype f16"}, on_lse([](const TensorView& t, S&) { return remake(t, DType::kF16); })},
      // ---- attention parameters ----
      {"ScaleNaN", kAttention, kInvalid, {"params.scale"}, [](A& a, S&) { a.params.scale = kNaN; }},
      {"ScaleNegative", kAttention, kInvalid, {"params.scale"}, [](A& a, S&) { a.params.scale = -1.0f; }},
      {"WindowNegative", kAttention, kInvalid, {"params.window_left", "-2"}, [](A& a, S&) { a.params.window_left = -2; }},
      {"SoftCapInfinite", kAttention, kInvalid, {"params.logits_soft_cap"},
       [](A& a, S&) { a.params.logits_soft_cap = std::numeric_limits<float>::infinity(); }},
      {"SoftCapNegative", kAttention, kInvalid, {"params.logits_soft_cap"}, [](A& a, S&) { a.params.logits_soft_cap = -3.0f; }},
      {"AlibiWrongLength", kAttention, kInvalid, {"params.alibi_slopes dimension 0"},
       [](A& a, S& s) { a.params.alibi_slopes = TensorView(s.alibi.data(), DType::kF32, {kQHeads - 1}); }},
      {"AlibiOnOtherDevice", kAttention, kInvalid, {"params.alibi_slopes is on cuda:0"},
       [](A& a, S&) { a.params.alibi_slopes = on_cuda(a.params.alibi_slopes); }},
      {"SinksWrongDtype", kAttention, kInvalid, {"params.sinks has dtype f16"},
       [](A& a, S&) { a.params.sinks = remake(a.params.sinks, DType::kF16); }},
      // ---- page tables ----
      {"PageIdOutOfRange", kTableUsers, kInvalid, {"table: page id 8 (row 0, page 1) is out of range"},
       [](A&, S& s) { s.block_table[1] = 8; }},
      {"PageIdNegative", kTableUsers, kInvalid, {"table: page id -1 (row 1, page 0)"}, [](A&, S& s) { s.block_table[3] = -1; }},
      {"SeqLenBeyondPages", kTableUsers, kInvalid, {"table.seq_lens[0] is 13", "3 pages of 4"},
       [](A&, S& s) { s.seq_lens[0] = 13; }},
      {"SeqLenNegative", kTableUsers, kInvalid, {"table.seq_lens[1] is -1"}, [](A&, S& s) { s.seq_lens[1] = -1; }},
      {"BlockTableWrongDtype", kTableUsers, kInvalid, {"table.block_table has dtype i64"},
       [](A& a, S& s) {
         set_table(a, BlockTable{TensorView(s.scratch.data(), DType::kI64, {2, 3}),
                                 std::get<BlockTable>(a.table).seq_lens});
       }},
      {"SeqLensWrongLength", kTableUsers, kInvalid, {"table.seq_lens dimension 0 (num_seqs) is 1"},
       [](A& a, S& s) {
         set_table(a, BlockTable{std::get<BlockTable>(a.table).block_table,
                                 TensorView(s.seq_lens.data(), DType::kI32, {1})});
       }},
      {"BlockTableOnOtherDevice", kTableUsers, kInvalid, {"table.block_table is on cuda:0"},
       [](A& a, S&) {
         const auto& bt = std::get<BlockTable>(a.table);
         set_table(a, BlockTable{on_cuda(bt.block_table), bt.seq_lens});
       }},
      {"CsrIndptrStart", kTableUsers, kInvalid, {"table.indptr[0] is 1"}, on_csr([](S& s) { s.indptr[0] = 1; })},
      {"CsrIndptrDecreasing", kTableUsers, kInvalid, {"table.indptr is decreasing at 2"},
       on_csr([](S& s) { s.indptr = {0, 3, 2}; })},
      {"CsrIndptrPastIndices", kTableUsers, kInvalid, {"table.indptr[2] = 5 exceeds indices length 4"},
       on_csr([](S& s) { s.indptr = {0, 2, 5}; })},
      {"CsrLastPageLenZero", kTableUsers, kInvalid, {"table.last_page_len[0] is 0"}, on_csr([](S& s) { s.last_page_len[0] = 0; })},
      {"CsrLastPageLenTooLong", kTableUsers, kInvalid, {"table.last_page_len[1] is 5"}, on_csr([](S& s) { s.last_page_len[1] = 5; })},
      {"CsrPageIdOutOfRange", kTableUsers, kInvalid, {"table: page id 99 (row 1, page 0)"}, on_csr([](S& s) { s.indices[2] = 99; })},
      {"CsrSequenceBeyondInt32", kTableUsers, kInvalid, {"table: sequence 0 has 2148532224 tokens", "more than 2^31 - 1"},
       [](A& a, S& s) {  // 2049 pages of 2^20 tokens (page 0 over and over): rejected before any read
         constexpr std::int64_t kBigPage = std::int64_t{1} << 20, kPageBytes = kBigPage * kKVHeads * kDim * 2;
         const auto k = reinterpret_cast<std::uintptr_t>(s.scratch.data());
         a.cache.k = TensorView(reinterpret_cast<void*>(k), DType::kF16, {1, kBigPage, kKVHeads, kDim});
         a.cache.v = TensorView(reinterpret_cast<void*>(k + kPageBytes), DType::kF16, {1, kBigPage, kKVHeads, kDim});
         s.indices.assign(2049, 0);
         s.indptr = {0, 2049, 2049};
         s.last_page_len = {static_cast<std::int32_t>(kBigPage), 1};
         set_table(a, CsrPageTable{TensorView(s.indptr.data(), DType::kI32, {3}), TensorView(s.indices.data(), DType::kI32, {2049}),
                                   TensorView(s.last_page_len.data(), DType::kI32, {2})});
       }},
      // ---- decode ----
      {"DecodeSeqCountDiffers", {Call::kDecode}, kInvalid, {"q has 1 sequences but the page table has 2"},
       [](A& a, S&) {
         a.q = tokens_of(a.q, 1);
         a.out = tokens_of(a.out, 1);
         a.lse = TensorView(a.lse.data(), DType::kF32, {1, kQHeads});
       }},
      {"PartitionNotPageMultiple", {Call::kDecode}, kInvalid, {"options.partition_size 6"},
       [](A& a, S&) { a.options.partition_size = 6; }},
      {"PartitionNegative", {Call::kDecode}, kInvalid, {"options.partition_size -4"},
       [](A& a, S&) { a.options.partition_size = -4; }},
      // ---- prefill ----
      {"QoIndptrWrongDtype", {Call::kPrefill}, kInvalid, {"qo_indptr has dtype i64"},
       [](A& a, S& s) { a.qo_indptr = TensorView(s.scratch.data(), DType::kI64, {3}); }},
      {"QoIndptrWrongLength", {Call::kPrefill}, kInvalid, {"qo_indptr dimension 0 (num_seqs + 1) is 2"},
       [](A& a, S&) { a.qo_indptr = a.qo_indptr.slice(0, 0, 2); }},
      {"QoIndptrStart", {Call::kPrefill}, kInvalid, {"qo_indptr[0] is 1"}, [](A&, S& s) { s.qo_indptr = {1, 3, 5}; }},
      {"QoIndptrDecreasing", {Call::kPrefill}, kInvalid, {"qo_indptr is decreasing at 2"}, [](A&, S& s) { s.qo_indptr = {0, 3, 2}; }},
      {"MoreQueriesThanKV", {Call::kPrefill}, kInvalid, {"sequence 1 has 6 queries but only 5 tokens"},
       [](A&, S& s) { s.qo_indptr = {0, 0, 6}; }},
      {"QoIndptrEndDiffers", {Call::kPrefill}, kInvalid, {"qo_indptr[num_seqs] is 4 but q has 5 tokens"},
       [](A&, S& s) { s.qo_indptr = {0, 3, 4}; }},
      {"QoIndptrOnOtherDevice", {Call::kPrefill}, kInvalid, {"qo_indptr is on cuda:0"},
       [](A& a, S&) { a.qo_indptr = on_cuda(a.qo_indptr); }},
      {"QoIndptrNullPointer", {Call::kPrefill}, kInvalid, {"qo_indptr has 3 elements but a null pointer"},
       [](A& a, S&) { a.qo_indptr = null_data(a.qo_indptr); }},
      // ---- cascade ----
      {"CascadeNoLevels", {Call::kCascade}, kInvalid, {"levels is empty"}, [](A& a, S&) { a.levels.clear(); }},
      {"SeqToRowOutOfRange", {Call::kCascade}, kInvalid, {"levels[0].seq_to_row[1] is 1"}, [](A&, S& s) { s.seq_to_row[1] = 1; }},
      {"SeqToRowBelowMinusOne", {Call::kCascade}, kInvalid, {"levels[0].seq_to_row[0] is -2"}, [](A&, S& s) { s.seq_to_row[0] = -2; }},
      {"SeqToRowWrongDtype", {Call::kCascade}, kInvalid, {"levels[0].seq_to_row has dtype i64"},
       [](A& a, S& s) { a.levels[0].seq_to_row = TensorView(s.scratch.data(), DType::kI64, {2}); }},
      {"SeqToRowWrongLength", {Call::kCascade}, kInvalid, {"levels[0].seq_to_row dimension 0 (num_seqs) is 1"},
       [](A& a, S&) { a.levels[0].seq_to_row = a.levels[0].seq_to_row.slice(0, 0, 1); }},
      {"LevelRowsWithoutMap", {Call::kCascade}, kInvalid, {"levels[0].table has 1 rows but there are 2 sequences"},
       [](A& a, S&) { a.levels[0].seq_to_row = TensorView{}; }},
      {"PrefixPageOutOfRange", {Call::kCascade}, kInvalid, {"levels[0].table: page id 8"}, [](A&, S& s) { s.prefix_table[0] = 8; }},
      {"CascadeSeqCountDiffers", {Call::kCascade}, kInvalid, {"levels[0].seq_to_row dimension 0 (num_seqs) is 2, expected 1"},
       [](A& a, S&) {
         a.q = tokens_of(a.q, 1);
         a.out = tokens_of(a.out, 1);
         a.lse = TensorView(a.lse.data(), DType::kF32, {1, kQHeads});
       }},
      // ---- append_kv ----
      {"AppendKWrongDtype", {Call::kAppend}, kInvalid, {"k has dtype i32"}, [](A& a, S&) { a.k_new = remake(a.k_new, DType::kI32); }},
      {"AppendKWrongRank", {Call::kAppend}, kInvalid, {"k has rank 2"},
       [](A& a, S&) { a.k_new = TensorView(a.k_new.data(), DType::kF32, {3, kKVHeads * kDim}); }},
      {"AppendKWrongHeads", {Call::kAppend}, kInvalid, {"k dimension 1 (num_kv_heads) is 1"},
       [](A& a, S&) { a.k_new = TensorView(a.k_new.data(), DType::kF32, {3, 1, kDim}); }},
      {"AppendVWrongHeadDim", {Call::kAppend}, kInvalid, {"v dimension 2 (head_dim) is 8"},
       [](A& a, S&) { a.v_new = TensorView(a.v_new.data(), DType::kF32, {3, kKVHeads, 8}); }},
      {"AppendTokenCountDiffers", {Call::kAppend}, kInvalid, {"k dimension 0 (num_tokens"}, [](A& a, S&) { a.k_new = tokens_of(a.k_new, 2); }},
      {"SlotOutOfRange", {Call::kAppend}, kInvalid, {"slot_mapping[1] is 32"}, [](A&, S& s) { s.slots[1] = kPages * kPageSize; }},
      {"SlotBelowMinusOne", {Call::kAppend}, kInvalid, {"slot_mapping[0] is -2"}, [](A&, S& s) { s.slots[0] = -2; }},
      {"SlotRepeated", {Call::kAppend}, kInvalid, {"slot_mapping[2] = 0 repeats"}, [](A&, S& s) { s.slots[2] = 0; }},
      {"SlotsWrongDtype", {Call::kAppend}, kInvalid, {"slot_mapping has dtype f32"}, [](A& a, S&) { a.slots = remake(a.slots, DType::kF32); }},
      {"AppendKOnOtherDevice", {Call::kAppend}, kInvalid, {"k is on cuda:0"}, [](A& a, S&) { a.k_new = on_cuda(a.k_new); }},
      {"AppendVNullPointer", {Call::kAppend}, kInvalid, {"v has 96 elements but a null pointer"},
       [](A& a, S&) { a.v_new = null_data(a.v_new); }},
      // ---- copy_blocks ----
      {"CopySourceOutOfRange", {Call::kCopy}, kInvalid, {"block_mapping[0] src page 8 is out of range"},
       [](A&, S& s) { s.block_mapping[0] = 8; }},
      {"CopyDestinationNegative", {Call::kCopy}, kInvalid, {"block_mapping[1] dst page -1"}, [](A&, S& s) { s.block_mapping[3] = -1; }},
      {"CopyDestinationTwice", {Call::kCopy}, kInvalid, {"block_mapping[1] writes page", "a second time"},
       [](A&, S& s) { s.block_mapping[3] = s.block_mapping[1]; }},
      {"CopySourceIsDestination", {Call::kCopy}, kInvalid, {"block_mapping uses page", "both as a source and as a destination"},
       [](A&, S& s) { s.block_mapping[2] = s.block_mapping[1]; }},
      {"CopyWrongShape", {Call::kCopy}, kInvalid, {"block_mapping dimension 1"},
       [](A& a, S&) { a.block_mapping = TensorView(a.block_mapping.data(), DType::kI32, {1, 4}); }},
      {"CopyWrongDtype", {Call::kCopy}, kInvalid, {"block_mapping has dtype f32"},
       [](A& a, S&) { a.block_mapping = remake(a.block_mapping, DType::kF32); }},
      {"CopyOnOtherDevice", {Call::kCopy}, kInvalid, {"block_mapping is on cuda:0"},
       [](A& a, S&) { a.block_mapping = on_cuda(a.block_mapping); }},
      // ---- merge_state / merge_states ----
      {"MergeShapesDiffer", {Call::kMerge}, kInvalid, {"v_b dimension 1 (num_heads) is 2"},
       [](A& a, S&) { a.v_b = TensorView(a.v_b.data(), DType::kF32, {3, 2, kDim}); }},
      {"MergeLseMissing", {Call::kMerge}, kInvalid, {"lse_a is required"}, [](A& a, S&) { a.lse_a = TensorView{}; }},
      {"MergeLseWrongDtype", {Call::kMerge}, kInvalid, {"lse_b has dtype f16"}, [](A& a, S&) { a.lse_b = remake(a.lse_b, DType::kF16); }},
      {"MergeOutWrongDtype", {Call::kMerge}, kInvalid, {"v_out has dtype i32"}, [](A& a, S&) { a.v_out = remake(a.v_out, DType::kI32); }},
      {"MergeNotContiguous", {Call::kMerge}, kInvalid, {"v_a must be contiguous along head_dim"},
       [](A& a, S& s) { a.v_a = TensorView(s.scratch.data(), DType::kF32, {3, kQHeads, kDim}, {128, 32, 2}); }},
      {"MergeLseOutWrongShape", {Call::kMerge}, kInvalid, {"lse_out dimension 1 (num_heads) is 2"},
       [](A& a, S&) { a.lse_out = TensorView(a.lse_out.data(), DType::kF32, {3, 2}); }},
      {"MergeOnOtherDevice", {Call::kMerge}, kInvalid, {"v_b is on cuda:0"}, [](A& a, S&) { a.v_b = on_cuda(a.v_b); }},
      {"MergeNullPointer", {Call::kMerge}, kInvalid, {"v_a has 192 elements but a null pointer"},
       [](A& a, S&) { a.v_a = null_data(a.v_a); }},
      {"StatesWrongRank", {Call::kMergeStates}, kInvalid, {"v has rank 3"},
       [](A& a, S&) { a.states = TensorView(a.states.data(), DType::kF32, {6, kQHeads, kDim}); }},
      {"StatesLseCountDiffers", {Call::kMergeStates}, kInvalid, {"lse dimension 1 (num_states) is 3"},
       [](A& a, S& s) { a.state_lse = TensorView(s.scratch.data(), DType::kF32, {3, 3, kQHeads}); }},
      {"StatesLseWrongDtype", {Call::kMergeStates}, kInvalid, {"lse has dtype f16"},
       [](A& a, S&) { a.state_lse = remake(a.state_lse, DType::kF16); }},
      {"StatesOutWrongShape", {Call::kMergeStates}, kInvalid, {"v_out dimension 2 (head_dim) is 8"},
       [](A& a, S&) { a.merged = TensorView(a.merged.data(), DType::kF32, {3, kQHeads, 8}); }},
      {"StatesOnOtherDevice", {Call::kMergeStates}, kInvalid, {"v is on cuda:0"}, [](A& a, S&) { a.states = on_cuda(a.states); }},
  };
  // Without a CUDA build, asking for the CUDA device is Unsupported, and says so by op.
  if (!kCudaBuilt) {
    rows.push_back({"CudaNotBuilt", kAllOps, kUnsupported, {"built without CUDA"},
                    [](A& a, S&) { a.ctx.device = kCuda; }});
  }
  return rows;
}

// ---- host-side helpers without output buffers: page-table conversions and cache views ------

struct BadHostCall {
  const char* name;
  ErrorCode code;
  std::vector<std::string> message;
  std::function<void()> call;
};
void PrintTo(const BadHostCall& row, std::ostream* os) { *os << row.name; }

std::vector<BadHostCall> bad_host_calls() {
  static std::vector<std::int32_t> bt = {3, 1, -1, 2, -1, -1}, lens = {6, 2}, indptr = {0, 2, 3},
                                   indices = {3, 1, 2}, last = {2, 2};
  static std::vector<std::int64_t> wide(8, 0);
  const auto table = [](std::vector<std::int32_t> l) {
    static std::vector<std::int32_t> storage;
    storage = std::move(l);
    return BlockTable{TensorView(bt.data(), DType::kI32, {2, 3}), TensorView(storage.data(), DType::kI32, {2})};
  };
  const auto csr = [](std::vector<std::int32_t> p, std::vector<std::int32_t> l) {
    static std::vector<std::int32_t> p_storage, l_storage;
    p_storage = std::move(p);
    l_storage = std::move(l);
    return CsrPageTable{TensorView(p_storage.data(), DType::kI32, {3}),
                        TensorView(indices.data(), DType::kI32, {3}),
                        TensorView(l_storage.data(), DType::kI32, {2})};
  };
  KVCacheSpec spec{KVLayout::kNHD, DType::kBF16, 4, 16, 2, 64};
  static std::vector<std::byte> k(spec.bytes_per_tensor()), v(spec.bytes_per_tensor());
  auto views = [](KVCacheSpec sp, bool null_k = false) {
    return [sp, null_k] { (void)sp.make_views(null_k ? nullptr : k.data(), v.data()); };
  };
  KVCacheSpec vllm_fp8 = spec, bad_dim = spec, big_dim = spec, int_type = spec, no_page = spec,
              no_heads = spec;
  vllm_fp8.layout = KVLayout::kVllmSplit;
  vllm_fp8.dtype = DType::kF8E4M3;
  vllm_fp8.head_dim = 24;
  bad_dim.head_dim = 12;
  big_dim.head_dim = 264;
  int_type.dtype = DType::kI32;
  no_page.page_size = 0;
  no_heads.num_kv_heads = 0;
  return {
      {"ToCsrPageSizeZero", kInvalid, {"page_size must be >= 1"}, [=] { (void)to_csr(table({6, 2}), 0); }},
      {"ToCsrSeqLenTooLong", kInvalid, {"seq_lens[0] = 13", "does not fit in 3 pages"}, [=] { (void)to_csr(table({13, 2}), 4); }},
      {"ToCsrSeqLenNegative", kInvalid, {"seq_lens[1] = -1"}, [=] { (void)to_csr(table({6, -1}), 4); }},
      {"ToCsrUsedPageNegative", kInvalid, {"block_table[1, 1] is -1"}, [=] { (void)to_csr(table({6, 5}), 4); }},
      {"ToCsrWrongDtype", kInvalid, {"block_table must be a host i32 tensor"},
       [=] { (void)to_csr(BlockTable{TensorView(wide.data(), DType::kI64, {2, 3}), table({6, 2}).seq_lens}, 4); }},
      {"ToCsrOnOtherDevice", kInvalid, {"seq_lens must be a host i32 tensor"},
       [=] { const BlockTable t = table({6, 2}); (void)to_csr(BlockTable{t.block_table, on_cuda(t.seq_lens)}, 4); }},
      {"ToCsrWrongRank", kInvalid, {"block_table must be a host i32 tensor of rank 2"},
       [=] { (void)to_csr(BlockTable{TensorView(bt.data(), DType::kI32, {6}), table({6, 2}).seq_lens}, 4); }},
      {"ToCsrNullPointer", kInvalid, {"block_table must be a host i32 tensor"},
       [=] { (void)to_csr(BlockTable{TensorView(nullptr, DType::kI32, {2, 3}), table({6, 2}).seq_lens}, 4); }},
      {"ToCsrLengthsDiffer", kInvalid, {"seq_lens has 1 entries"},
       [=] { (void)to_csr(BlockTable{table({6, 2}).block_table, TensorView(lens.data(), DType::kI32, {1})}, 4); }},
      {"ToBlockPageSizeZero", kInvalid, {"page_size must be >= 1"}, [=] { (void)to_block_table(csr({0, 2, 3}, {2, 2}), 0); }},
      {"ToBlockIndptrStart", kInvalid, {"indptr[0] must be 0"}, [=] { (void)to_block_table(csr({1, 2, 3}, {2, 2}), 4); }},
      {"ToBlockIndptrDecreasing", kInvalid, {"indptr is decreasing"}, [=] { (void)to_block_table(csr({0, 2, 1}, {2, 2}), 4); }},
      {"ToBlockIndptrPastIndices", kInvalid, {"past the end of indices"}, [=] { (void)to_block_table(csr({0, 2, 4}, {2, 2}), 4); }},
      {"ToBlockLastPageLenZero", kInvalid, {"last_page_len[1] is 0"}, [=] { (void)to_block_table(csr({0, 2, 3}, {2, 0}), 4); }},
      {"ToBlockLastPageLenTooLong", kInvalid, {"last_page_len[0] is 5"}, [=] { (void)to_block_table(csr({0, 2, 3}, {5, 2}), 4); }},
      {"ToBlockWrongDtype", kInvalid, {"indices must be a host i32 tensor"},
       [=] { CsrPageTable t = csr({0, 2, 3}, {2, 2}); t.indices = remake(t.indices, DType::kF32); (void)to_block_table(t, 4); }},
      {"MakeViewsHeadDim12", kUnsupported, {"head_dim 12"}, views(bad_dim)},
      {"MakeViewsHeadDim264", kUnsupported, {"head_dim 264"}, views(big_dim)},
      {"MakeViewsIndexDtype", kInvalid, {"dtype must be a float type"}, views(int_type)},
      {"MakeViewsPageSizeZero", kInvalid, {"page_size >= 1"}, views(no_page)},
      {"MakeViewsNoHeads", kInvalid, {"num_kv_heads >= 1"}, views(no_heads)},
      {"MakeViewsVllmChunk", kInvalid, {"head_dim 24 is not a multiple of the vllm layout's x = 16"}, views(vllm_fp8)},
      {"MakeViewsNullPointer", kInvalid, {"k_data", "null"}, views(spec, true)},
  };
}

class BadHostCallTest : public ::testing::TestWithParam<BadHostCall> {};

TEST_P(BadHostCallTest, Throws) {
  const BadHostCall& row = GetParam();
  expect_error(row.call, row.name, row.code, row.message);
}

INSTANTIATE_TEST_SUITE_P(HostCalls, BadHostCallTest, ::testing::ValuesIn(bad_host_calls()),
                         [](const ::testing::TestParamInfo<BadHostCall>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace pagedattn::testing
