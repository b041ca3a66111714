// The demo's serving loop: a small continuous-batching scheduler over the KV cache manager.
//
// Each step: decodes first (one token each, preempting the newest sequence when the pool is
// full), then prefill chunks of running sequences, then new admissions, all under one token
// budget. Then, in the order a real engine would: copy-on-write page copies, K/V writes into the
// slots the manager assigned (then reported with mark_computed, which is what makes full pages
// available to prefix hits), attention (prefill for chunks, decode for single tokens), each
// call repeated with the reference implementation and compared. With --device cuda the writes
// and the attention also run on a device twin of the pool (demo_device.h), which must equal the
// host pool byte for byte after every verified step.
#include <algorithm>
#include <cmath>
#include <deque>

#include <fmt/core.h>

#include "cli.h"
#include "demo.h"
#include "demo_device.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn::cli::demo {
namespace {

constexpr double kLseTolerance = 1e-3;  // abs + rel; the LSE is f32 on every path
constexpr int kMaxReportedMismatches = 5;

struct Seq {
  int uid = 0;  // queries and sampled tokens derive from it
  SeqId id = -1;
  std::vector<TokenId> tokens;  // prompt, then sampled tokens; those in the cache are a prefix
  std::int64_t prompt_len = 0;
  std::int64_t max_output = 1;
  std::int64_t generated = 0;  // sampled tokens (the first comes from the last prompt position)
  std::int64_t computed = 0;   // prompt tokens whose K/V is in the cache (written or prefix hit)
  std::int64_t prefix_hit = 0;  // leading prompt tokens the prefix cache supplied
  bool fork_pending = false;
  bool done = false;
  bool prefilling() const { return computed < prompt_len; }
};

// Queries at positions [begin, end) of one sequence.
struct Work {
  Seq* seq = nullptr;
  std::int64_t begin = 0, end = 0;
};

// Host buffer for a tensor of `count` elements of `dtype` (4-byte aligned).
struct Buffer {
  std::vector<std::uint32_t> words;
  void* resize(std::int64_t count, DType dtype) {
    words.assign(static_cast<std::size_t>((count * static_cast<std::int64_t>(dtype_size(dtype)) + 3) / 4), 0);
    return words.data();
  }
};

class Engine {
 public:
  Engine(const DemoOptions& o, const Geometry& g)
      : o_(o), g_(g), pool_(g),
        manager_(KVCacheManagerConfig{g.num_pages, g.page_size, !o.no_prefix_caching}),
        tolerance_(output_tolerance(g.q_dtype, g.kv_dtype)) {
    fast_.num_threads = o.threads;
    reference_ = fast_;
    reference_.implementation = Implementation::kReference;
    if (resolve_device(o.device).type == DeviceType::kCUDA) device_ = make_device_pool(pool_);
    for (const Request& r : make_requests(o)) {
      auto s = std::make_unique<Seq>();
      s->uid = r.uid;
      s->tokens = r.prompt;
      s->prompt_len = static_cast<std::int64_t>(r.prompt.size());
      s->max_output = r.max_output;
      s->fork_pending = r.fork;
      stats_.prompt_tokens += s->prompt_len;
      stats_.sequences_planned += r.fork ? 2 : 1;
      waiting_.push_back(std::move(s));
    }
    stats_.requests = o.requests;
    next_uid_ = o.requests;
  }

  DemoStats run(const std::function<void(const std::string&)>& on_step) {
    const double start = now_seconds();
    while (!waiting_.empty() || !running_.empty()) {
      step();
      if (on_step) {
        on_step(fmt::format("step {} | running {} | waiting {} | done {}/{} | pages {}/{}",
                            stats_.steps, running_.size(), waiting_.size(), stats_.sequences_done,
                            stats_.sequences_planned, last_pages_used_, g_.num_pages));
      }
    }
    const CacheMetrics m = manager_.metrics();
    stats_.prefix_hit_rate = m.prefix_hit_rate();
    stats_.prefix_pages_hit = m.prefix_pages_hit;
    stats_.prefix_pages_queried = m.prefix_pages_queried;
    manager_.check_integrity();
    ++stats_.integrity_checks;
    stats_.wall_seconds = now_seconds() - start;
    return stats_;
  }

 private:
  void step() {
    const bool verify = o_.verify_every > 0 && stats_.steps % o_.verify_every == 0;
    std::int64_t budget = o_.token_budget;
    std::vector<Work> decodes, prefills;
    std::vector<PageCopy> copies;
    bool preempted = false;

    // 1. Decodes: every running sequence past its prompt appends its last sampled token.
    for (std::size_t i = 0; i < running_.size() && budget > 0;) {
      Seq& s = *running_[i];
      if (s.prefilling()) { ++i; continue; }
      bool self_preempted = false;
      while (!manager_.can_append(s.id, 1)) {
        preempted = true;
        const std::size_t victim = running_.size() - 1;  // the newest sequence yields first
        preempt(victim);
        if (victim == i) { self_preempted = true; break; }
      }
      if (self_preempted) continue;
      const std::vector<PageCopy> c = manager_.append(s.id, std::span(&s.tokens.back(), 1));
      copies.insert(copies.end(), c.begin(), c.end());
      const std::int64_t len = manager_.length(s.id);
      decodes.push_back({&s, len - 1, len});
      --budget;
      ++i;
    }
    // 2. Prefill chunks of sequences admitted earlier, oldest first.
    for (auto& sp : running_) {
      if (budget == 0) break;
      if (!sp->prefilling()) continue;
      const std::int64_t chunk = std::min(sp->prompt_len - sp->computed, budget);
      prefills.push_back({sp.get(), sp->computed, sp->computed + chunk});
      budget -= chunk;
    }
    // 3. Admissions, while the pool and the budget allow. Not in a step that had to preempt:
    //    the pages just freed are needed by the sequences already running.
    while (!preempted && budget > 0 && !waiting_.empty()) {
      Seq& w = *waiting_.front();
      const std::span<const TokenId> prompt(w.tokens.data(), static_cast<std::size_t>(w.prompt_len));
      if (!manager_.can_allocate(prompt)) break;
      const AddedSequence added = manager_.add_sequence(prompt);
      w.id = added.id;
      w.prefix_hit = w.computed = added.num_cached_tokens;
      check_prefix_hit(w);
      const std::int64_t chunk = std::min(w.prompt_len - w.computed, budget);
      prefills.push_back({&w, w.computed, w.computed + chunk});
      budget -= chunk;
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    // A step that only preempted admits again in the next one; otherwise nothing can run.
    check_arg(preempted || !decodes.empty() || !prefills.empty(),
              "demo: no sequence can run (the pool is too small for the next request)");

    // 4. Copy-on-write copies before anything writes into the new pages.
    if (!copies.empty()) {
      std::vector<std::int64_t> mapping;
      for (const PageCopy& c : copies) { mapping.push_back(c.src); mapping.push_back(c.dst); }
      const TensorView mapping_view(mapping.data(), DType::kI64, {static_cast<std::int64_t>(copies.size()), 2});
      copy_blocks(fast_, pool_.views(), mapping_view);
      if (device_) device_->copy_blocks(mapping_view);
      stats_.cow_copies += static_cast<std::int64_t>(copies.size());
    }
    // 5. K/V of every new token; only once they are written may their pages serve prefix hits.
    std::vector<Work> writes = decodes;
    writes.insert(writes.end(), prefills.begin(), prefills.end());
    write_kv(writes);
    for (const Work& w : writes) manager_.mark_computed(w.seq->id, w.end);
    if (device_ && verify) check_device_pool();
    // 6. Attention, alternating page-table formats when asked to.
    const bool csr = o_.page_table == "csr" || (o_.page_table == "alternate" && stats_.steps % 2 == 1);
    if (!decodes.empty()) attend(decodes, /*is_decode=*/true, csr, verify);
    if (!prefills.empty()) attend(prefills, /*is_decode=*/false, csr, verify);

    // 7. Sample, fork, finish.
    std::vector<std::unique_ptr<Seq>> children;
    for (const Work& w : decodes) {
      Seq& s = *w.seq;
      if (++s.generated == s.max_output) finish(s);
      else s.tokens.push_back(sample_token(s.uid, w.end));
    }
    for (const Work& w : prefills) {
      Seq& s = *w.seq;
      stats_.prefill_tokens_computed += w.end - w.begin;
      s.computed = w.end;
      if (s.prefilling()) continue;
      s.generated = 1;
      s.tokens.push_back(sample_token(s.uid, s.prompt_len));
      if (s.generated == s.max_output) { finish(s); continue; }
      if (s.fork_pending) children.push_back(fork(s));
    }
    std::erase_if(running_, [](const std::unique_ptr<Seq>& s) { return s->done; });
    for (auto& c : children) running_.push_back(std::move(c));

    if (verify) { manager_.check_integrity(); ++stats_.integrity_checks; }
    const CacheMetrics m = manager_.metrics();
    last_pages_used_ = m.pages_used;
    stats_.peak_pages_used = std::max(stats_.peak_pages_used, m.pages_used);
    stats_.sum_paged_slots += static_cast<double>(m.pages_used * g_.page_size);
    stats_.sum_logical_tokens += static_cast<double>(m.tokens_stored);
    stats_.sum_fragmentation_pct += m.internal_fragmentation_pct;
    for (const auto& s : running_) stats_.sum_contiguous_slots += static_cast<double>(s->prompt_len + s->max_output);
    ++stats_.steps;
  }

  // Frees running_[index] and puts it back at the head of the queue, to be recomputed from
  // its prompt (its full pages usually come straight back from the prefix cache).
  void preempt(std::size_t index) {
    std::unique_ptr<Seq> s = std::move(running_[index]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
    check_written(*s, s->prefilling() ? s->computed : manager_.length(s->id));
    manager_.free(s->id);
    s->id = -1;
    s->tokens.resize(static_cast<std::size_t>(s->prompt_len));
    s->generated = s->computed = s->prefix_hit = 0;
    waiting_.push_front(std::move(s));
    ++stats_.preemptions;
  }

  std::unique_ptr<Seq> fork(Seq& parent) {
    parent.fork_pending = false;
    auto child = std::make_unique<Seq>();
    child->uid = next_uid_++;
    child->id = manager_.fork(parent.id);
    child->tokens.assign(parent.tokens.begin(), parent.tokens.begin() + parent.prompt_len);
    // The second sample differs from the first, so the two continuations diverge at once and
    // the shared last page must be copied on write.
    TokenId t = sample_token(child->uid, parent.prompt_len);
    if (t == parent.tokens.back()) t = (t + 1) % 32000;
    child->tokens.push_back(t);
    child->prompt_len = child->computed = parent.prompt_len;
    child->max_output = parent.max_output;
    child->generated = 1;
    ++stats_.forks;
    return child;
  }

  void finish(Seq& s) {
    check_written(s, manager_.length(s.id));
    stats_.generated_tokens += s.generated;
    ++stats_.sequences_done;
    manager_.free(s.id);
    s.done = true;
  }

  // Reads back the cache through the sequence's page list: tokens [0, n) must hold exactly the
  // K/V of the sequence's own tokens.
  void check_written(const Seq& s, std::int64_t n) {
    for (std::int64_t pos = 0; pos < n; ++pos) {
      if (pool_.holds(manager_.slot(s.id, pos), s.tokens[static_cast<std::size_t>(pos)], pos)) continue;
      if (++stats_.kv_mismatches <= kMaxReportedMismatches) {
        fmt::print(stderr, "\nKV MISMATCH: sequence {} position {} (slot {}) does not hold its token's K/V\n",
                   s.uid, pos, manager_.slot(s.id, pos));
      }
    }
    stats_.kv_tokens_checked += n;
  }

  void write_kv(const std::vector<Work>& work) {
    std::int64_t n = 0;
    for (const Work& w : work) n += w.end - w.begin;
    if (n == 0) return;
    const std::int64_t row = g_.num_kv_heads * g_.head_dim;
    std::vector<float> k(static_cast<std::size_t>(n * row)), v(k.size());
    std::vector<std::int64_t> slots;
    slots.reserve(static_cast<std::size_t>(n));
    for (const Work& w : work) {
      for (std::int64_t pos = w.begin; pos < w.end; ++pos) {
        const auto at = static_cast<std::size_t>(static_cast<std::int64_t>(slots.size()) * row);
        token_kv(w.seq->tokens[static_cast<std::size_t>(pos)], pos, g_, &k[at], &v[at]);
        slots.push_back(manager_.slot(w.seq->id, pos));
      }
    }
    const TensorView k_view(k.data(), DType::kF32, {n, g_.num_kv_heads, g_.head_dim});
    const TensorView v_view(v.data(), DType::kF32, {n, g_.num_kv_heads, g_.head_dim});
    const TensorView slots_view(slots.data(), DType::kI64, {n});
    append_kv(fast_, pool_.views(), k_view, v_view, slots_view);
    if (device_) device_->append_kv(k_view, v_view, slots_view);
  }

  // The device twin must hold the host pool's bytes (the CUDA cache writes store the CPU's).
  void check_device_pool() {
    const std::int64_t differ = device_->differing_bytes(pool_);
    ++stats_.device_pool_checks;
    if (differ == 0) return;
    if (++stats_.kv_mismatches <= kMaxReportedMismatches) {
      fmt::print(stderr, "\nKV MISMATCH: after step {} the GPU's pool differs from the host pool in {} bytes\n",
                 stats_.steps, differ);
    }
  }

  // A prefix hit must come with its K/V already written: the manager registers pages only once
  // mark_computed reports them. A hit token that does not read back is a manager bug, counted
  // both as a hit token written late and as a KV mismatch (which fails the demo).
  void check_prefix_hit(const Seq& s) {
    for (std::int64_t pos = 0; pos < s.prefix_hit; ++pos) {
      if (pool_.holds(manager_.slot(s.id, pos), s.tokens[static_cast<std::size_t>(pos)], pos)) continue;
      ++stats_.prefix_tokens_rewritten;
      if (++stats_.kv_mismatches <= kMaxReportedMismatches) {
        fmt::print(stderr, "\nKV MISMATCH: sequence {} prefix hit position {} (slot {}) holds no K/V yet\n",
                   s.uid, pos, manager_.slot(s.id, pos));
      }
    }
    stats_.kv_tokens_checked += s.prefix_hit;
  }

  void attend(const std::vector<Work>& work, bool is_decode, bool csr, bool verify);
  void compare(const std::vector<Work>& work, const Buffer& out, const Buffer& ref,
               const std::vector<float>& lse, const std::vector<float>& ref_lse, bool is_decode);

  const DemoOptions& o_;
  Geometry g_;
  KVPool pool_;
  std::unique_ptr<DevicePool> device_;  // --device cuda: the pool's twin, where attention runs
  KVCacheManager manager_;
  double tolerance_;
  Context fast_, reference_;
  std::deque<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  int next_uid_ = 0;
  std::int64_t last_pages_used_ = 0;
  DemoStats stats_;
};

void Engine::attend(const std::vector<Work>& work, bool is_decode, bool csr, bool verify) {
  std::vector<SeqId> ids;
  std::vector<std::int32_t> qo_indptr{0};
  std::int64_t total_q = 0;
  for (const Work& w : work) {
    ids.push_back(w.seq->id);
    total_q += w.end - w.begin;
    qo_indptr.push_back(static_cast<std::int32_t>(total_q));
  }
  // Page tables straight from the manager; a prefill chunk sees only the KV up to its end.
  BlockTableData blocks = manager_.block_table(ids);
  for (std::size_t i = 0; i < work.size(); ++i) blocks.seq_lens[i] = static_cast<std::int32_t>(work[i].end);
  CsrPageTableData csr_data;
  PageTable table = blocks.view();
  if (csr) {
    csr_data = to_csr(blocks.view(), g_.page_size);
    table = csr_data.view();
  }

  const std::int64_t qh = g_.num_q_heads, d = g_.head_dim;
  Buffer q, out, ref;
  void* q_data = q.resize(total_q * qh * d, g_.q_dtype);
  std::vector<float> qf(static_cast<std::size_t>(qh * d));
  std::int64_t row = 0;
  for (const Work& w : work) {
    for (std::int64_t pos = w.begin; pos < w.end; ++pos, ++row) {
      query_values(w.seq->uid, pos, g_, qf.data());
      for (std::int64_t i = 0; i < qh * d; ++i) store_from_float(q_data, g_.q_dtype, row * qh * d + i, qf[static_cast<std::size_t>(i)]);
    }
  }
  const TensorView q_view(q_data, g_.q_dtype, {total_q, qh, d});
  const TensorView out_view(out.resize(total_q * qh * d, g_.q_dtype), g_.q_dtype, {total_q, qh, d});
  const TensorView ref_view(ref.resize(total_q * qh * d, g_.q_dtype), g_.q_dtype, {total_q, qh, d});
  std::vector<float> lse(static_cast<std::size_t>(total_q * qh)), ref_lse(lse.size());
  const TensorView lse_view(lse.data(), DType::kF32, {total_q, qh});
  const TensorView ref_lse_view(ref_lse.data(), DType::kF32, {total_q, qh});
  const TensorView indptr_view(qo_indptr.data(), DType::kI32, {static_cast<std::int64_t>(qo_indptr.size())});
  const AttentionParams params;  // causal, scale 1/sqrt(head_dim)

  auto run = [&](const Context& ctx, const TensorView& o, const TensorView& l) {
    if (is_decode) decode(ctx, q_view, pool_.views(), table, params, o, l);
    else prefill(ctx, q_view, indptr_view, pool_.views(), table, params, o, l);
  };
  if (device_) {
    stats_.attention_seconds += device_->attend(q_view, is_decode ? TensorView{} : indptr_view, table, params,
                                                out_view, lse_view);
  } else {
    const double t0 = now_seconds();
    run(fast_, out_view, lse_view);
    stats_.attention_seconds += now_seconds() - t0;
  }
  ++stats_.attention_calls;
  stats_.attention_query_tokens += total_q;
  stats_.outputs_total += total_q;
  const double token_bytes = static_cast<double>(2 * g_.num_kv_heads * d) * static_cast<double>(dtype_size(g_.kv_dtype));
  for (const Work& w : work) stats_.attention_kv_bytes += token_bytes * static_cast<double>(w.end);

  if (!verify) return;
  run(reference_, ref_view, ref_lse_view);
  compare(work, out, ref, lse, ref_lse, is_decode);
  stats_.outputs_verified += total_q;
}

void Engine::compare(const std::vector<Work>& work, const Buffer& out, const Buffer& ref,
                     const std::vector<float>& lse, const std::vector<float>& ref_lse, bool is_decode) {
  const std::int64_t qh = g_.num_q_heads, d = g_.head_dim;
  std::int64_t row = 0;
  for (const Work& w : work) {
    for (std::int64_t pos = w.begin; pos < w.end; ++pos, ++row) {
      std::string problem;
      for (std::int64_t h = 0; h < qh && problem.empty(); ++h) {
        const std::size_t li = static_cast<std::size_t>(row * qh + h);
        const double lg = lse[li], le = ref_lse[li];
        if (!(std::fabs(lg - le) <= kLseTolerance * (1.0 + std::fabs(le)))) {
          problem = fmt::format("head {} lse {} expected {}", h, lg, le);
        }
        for (std::int64_t i = 0; i < d && problem.empty(); ++i) {
          const std::int64_t e = (row * qh + h) * d + i;
          const double got = load_as_float(out.words.data(), g_.q_dtype, e);
          const double want = load_as_float(ref.words.data(), g_.q_dtype, e);
          const double err = std::fabs(got - want);
          if (std::isfinite(err)) stats_.max_abs_error = std::max(stats_.max_abs_error, err);
          if (!(err <= tolerance_ * (1.0 + std::fabs(want)))) {
            problem = fmt::format("head {} dim {} got {} expected {}", h, i, got, want);
          }
        }
      }
      if (problem.empty()) continue;
      if (++stats_.output_mismatches <= kMaxReportedMismatches) {
        fmt::print(stderr, "\nMISMATCH ({}): sequence {} position {} (kv length {}): {}\n",
                   is_decode ? "decode" : "prefill", w.seq->uid, pos, w.end, problem);
      }
    }
  }
}

}  // namespace

DemoStats run_serving_loop(const DemoOptions& o, const Geometry& g,
                           const std::function<void(const std::string&)>& on_step) {
  Engine engine(o, g);
  return engine.run(on_step);
}

}  // namespace pagedattn::cli::demo
