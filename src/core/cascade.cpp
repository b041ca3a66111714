// cascade_decode: each level is attended separately into a partial state, then the states are
// merged. A level whose rows are shared by several sequences, and whose variant does not depend
// on positions, runs as a non-causal multi-query prefill over the shared row, so the row's KV
// is read once for the whole group.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend_select.h"
#include "core/validate.h"
#if PAGEDATTN_WITH_CUDA
#include "cuda/cascade.h"
#include "cuda/scoped_device.h"
#endif
#include "cpu/cpu_backend.h"
#include "cpu/merge_states.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

namespace pagedattn {

namespace {
using detail::AttentionProblem;

struct LevelPlan {
  detail::PageTableAccess table;
  std::vector<std::int32_t> seq_to_row;
};

// Runs one level into the f32 partial state (part_v [num_seqs, Hq, D], part_lse [num_seqs, Hq]).
void run_level(const Context& ctx, const AttentionProblem& base, const LevelPlan& level,
               const std::vector<std::int64_t>& key_offset, const std::vector<std::int64_t>& total,
               float* part_v, float* part_lse) {
  const std::int64_t S = base.num_seqs, Hq = base.num_q_heads, D = base.head_dim;
  AttentionProblem p = base;
  p.table = level.table;
  p.variant.sinks = nullptr;  // sinks enter once, at the final merge
  p.variant.causal = false;
  p.qo.out = reinterpret_cast<std::byte*>(part_v);
  p.qo.out_dtype = DType::kF32;
  p.qo.out_token_stride = Hq * D;
  p.qo.out_head_stride = D;
  p.qo.lse = part_lse;
  p.qo.lse_token_stride = Hq;
  p.qo.lse_head_stride = 1;

  std::vector<std::int64_t> users(static_cast<std::size_t>(level.table.num_rows), 0);
  for (std::int32_t r : level.seq_to_row) if (r >= 0) ++users[static_cast<std::size_t>(r)];
  bool shared = false;
  for (std::int64_t u : users) shared |= u > 1;
  const bool positional = p.variant.alibi_slopes != nullptr || p.variant.window_left >= 0;
  const bool reference = ctx.implementation == Implementation::kReference;

  if (!shared || positional || reference) {
    p.seq_to_row = level.seq_to_row.data();
    p.key_pos_offset = key_offset.data();
    p.query_pos_end = total.data();
    if (reference) return cpu::reference_attention(p);
    return cpu::decode(p, DecodeOptions{}, ctx.num_threads);
  }

  // Group the queries by row: row r's queries are [indptr[r], indptr[r+1]) of a packed copy.
  const std::int64_t rows = level.table.num_rows;
  std::vector<std::int32_t> indptr(static_cast<std::size_t>(rows + 1), 0);
  for (std::int64_t r = 0; r < rows; ++r) indptr[static_cast<std::size_t>(r + 1)] = indptr[static_cast<std::size_t>(r)] + static_cast<std::int32_t>(users[static_cast<std::size_t>(r)]);
  std::vector<std::int64_t> order(static_cast<std::size_t>(indptr.back()));  // packed -> seq
  std::vector<std::int32_t> fill(indptr.begin(), indptr.end() - 1);
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int32_t r = level.seq_to_row[static_cast<std::size_t>(s)];
    if (r >= 0) order[static_cast<std::size_t>(fill[static_cast<std::size_t>(r)]++)] = s;
  }
  const auto qsize = static_cast<std::int64_t>(dtype_size(p.qo.q_dtype));
  const auto packed = static_cast<std::int64_t>(order.size());
  std::vector<std::byte> q_packed(static_cast<std::size_t>(packed * Hq * D * qsize));
  std::vector<float> v_packed(static_cast<std::size_t>(packed * Hq * D));
  std::vector<float> lse_packed(static_cast<std::size_t>(packed * Hq));
  for (std::int64_t i = 0; i < packed; ++i) {
    const std::int64_t s = order[static_cast<std::size_t>(i)];
    for (std::int64_t h = 0; h < Hq; ++h) {
      std::memcpy(q_packed.data() + (i * Hq + h) * D * qsize,
                  base.qo.q + (s * base.qo.q_token_stride + h * base.qo.q_head_stride) * qsize,
                  static_cast<std::size_t>(D * qsize));
    }
  }
  p.num_seqs = rows;
  p.qo_indptr = indptr.data();
  p.qo.q = q_packed.data();
  p.qo.q_token_stride = Hq * D;
  p.qo.q_head_stride = D;
  p.qo.out = reinterpret_cast<std::byte*>(v_packed.data());
  p.qo.lse = lse_packed.data();
  cpu::prefill(p, ctx.num_threads);

  // Scatter back; sequences without a row at this level get the empty state.
  for (std::int64_t s = 0; s < S; ++s) {
    std::fill_n(part_v + s * Hq * D, Hq * D, 0.0f);
    std::fill_n(part_lse + s * Hq, Hq, detail::kNegInf);
  }
  for (std::int64_t i = 0; i < packed; ++i) {
    const std::int64_t s = order[static_cast<std::size_t>(i)];
    std::copy_n(v_packed.data() + i * Hq * D, Hq * D, part_v + s * Hq * D);
    std::copy_n(lse_packed.data() + i * Hq, Hq, part_lse + s * Hq);
  }
}
#if PAGEDATTN_WITH_CUDA
// The device levels, checked against their validated host copies, and the CUDA cascade's plan.
struct GpuCascade {
  std::vector<cuda::CascadeLevelDesc> descs;
  cuda::CascadePlan plan;
};

GpuCascade plan_on_gpu(const Context& ctx, const AttentionProblem& base, std::span<const CascadeLevel> levels,
                       std::span<const CascadeLevel> host_levels, const std::vector<LevelPlan>& plans) {
  const std::int64_t S = base.num_seqs;
  GpuCascade g;
  g.descs.resize(levels.size());
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const std::string name = "levels[" + std::to_string(l) + "]";
    cuda::CascadeLevelDesc& d = g.descs[l];
    d.table = detail::resolve_device_table(ctx, levels[l].table, host_levels[l].table, plans[l].table,
                                           name + ".table");
    const TensorView& map = levels[l].seq_to_row;
    check_arg(map.defined() == host_levels[l].seq_to_row.defined(),
              [&] { return name + ".seq_to_row and its host copy must be both given or both absent"; });
    if (map.defined()) {
      detail::check_tensor(ctx, map, name + ".seq_to_row", {DType::kI32}, 1);
      detail::check_dim(map, name + ".seq_to_row", 0, S, "num_seqs");
      check_arg(map.is_contiguous(), [&] { return name + ".seq_to_row must be contiguous on CUDA"; });
      d.seq_to_row = map.data_as<const std::int32_t>();
    }
    cuda::describe_level(plans[l].table, plans[l].seq_to_row.data(), S, d);
  }
  g.plan = cuda::plan_cascade(base, g.descs, ctx.device.index);
  return g;
}
#endif

}  // namespace

namespace {

// cascade_decode's arguments, validated: the base problem and each level's validated host table
// and row map.
struct CascadeCall {
  AttentionProblem base;
  std::vector<LevelPlan> plans;
  std::span<const CascadeLevel> checked;  // the levels whose values were checked (host copies on CUDA)
  std::vector<std::int64_t> total;        // each sequence's KV over all levels
  bool on_gpu = false;
};

CascadeCall resolve_cascade(const Context& ctx, const TensorView& q, const PagedKV& cache,
                            std::span<const CascadeLevel> levels, const AttentionParams& params,
                            const TensorView& out, const TensorView& lse, const CascadeOptions& options) {
  CascadeCall call;
  detail::require_backend(ctx, "cascade_decode");
  check_arg(!levels.empty(), "levels is empty: cascade_decode needs at least one level");
  const bool on_gpu = call.on_gpu = ctx.device.type == DeviceType::kCUDA;
  check_arg(!on_gpu || options.host_levels.size() == levels.size(), [&] {
    return "options.host_levels is required on CUDA: host copies of the " + std::to_string(levels.size()) +
           " levels (got " + std::to_string(options.host_levels.size()) +
           "), used to validate them and plan the launches without reading GPU memory";
  });
  // The levels whose values are checked: the host copies on CUDA.
  const std::span<const CascadeLevel> checked = call.checked = on_gpu ? options.host_levels : levels;
  const Context host = Context::cpu();
  check_arg(q.rank() == 3, [&] {
    return "q has rank " + std::to_string(q.rank()) + ", expected 3 [num_seqs, num_q_heads, head_dim]";
  });
  AttentionProblem& base = call.base;
  base.kv = detail::resolve_cache(ctx, cache);
  base.num_seqs = q.size(0);
  check_supported(!on_gpu || base.num_seqs <= detail::kCudaMaxGridYZ, [&] {
    return "cascade_decode on CUDA supports at most 65535 sequences per call, got " + std::to_string(base.num_seqs);
  });
  base.num_q_heads = q.size(1);
  base.num_kv_heads = base.kv.num_kv_heads;
  base.head_dim = base.kv.head_dim;
  detail::check_heads(base.num_q_heads, base.num_kv_heads, "q");
  base.qo = detail::resolve_qo(ctx, q, out, lse, base.num_seqs, base.num_q_heads, base.head_dim);
  base.variant = detail::resolve_variant(ctx, params, base.num_q_heads, base.head_dim);

  const std::int64_t S = base.num_seqs;
  std::vector<LevelPlan>& plans = call.plans;
  plans.resize(levels.size());
  std::vector<std::int64_t>& total = call.total;
  total.assign(static_cast<std::size_t>(S), 0);
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const std::string name = "levels[" + std::to_string(l) + "]";
    LevelPlan& plan = plans[l];
    plan.table = detail::resolve_table(ctx, checked[l].table, base.kv, name + ".table");
    plan.seq_to_row.resize(static_cast<std::size_t>(S));
    const TensorView& map = checked[l].seq_to_row;
    if (map.defined()) {
      detail::check_tensor(on_gpu ? host : ctx, map, name + ".seq_to_row", {DType::kI32}, 1);
      detail::check_dim(map, name + ".seq_to_row", 0, S, "num_seqs");
    } else {
      check_arg(plan.table.num_rows == S, [&] {
        return name + ".table has " + std::to_string(plan.table.num_rows) + " rows but there are " + std::to_string(S) +
               " sequences and no seq_to_row";
      });
    }
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t r = map.defined() ? map.data_as<const std::int32_t>()[s * map.stride(0)] : s;
      check_arg(r >= -1 && r < plan.table.num_rows, [&] {
        return name + ".seq_to_row[" + std::to_string(s) + "] is " + std::to_string(r) +
            ", expected -1 or a row in [0, " + std::to_string(plan.table.num_rows) + ")";
      });
      plan.seq_to_row[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(r);
      if (r >= 0) total[static_cast<std::size_t>(s)] += plan.table.row(r).kv_len;
    }
  }
  // The levels the kernels read (the device tensors on CUDA), apart from the outputs.
  std::vector<detail::NamedView> inputs = detail::attention_inputs(cache, params);
  for (std::size_t l = 0; l < levels.size(); ++l) {
    detail::add_table_inputs(inputs, levels[l].table, static_cast<int>(l));
    inputs.push_back({&levels[l].seq_to_row, "seq_to_row", static_cast<int>(l)});
  }
  detail::check_outputs_apart(out, lse, inputs);
  if (on_gpu) detail::check_workspace_apart(ctx, q, out, lse, inputs);

  return call;
}

}  // namespace

void cascade_decode(const Context& ctx, const TensorView& q, const PagedKV& cache,
                    std::span<const CascadeLevel> levels, const AttentionParams& params,
                    const TensorView& out, const TensorView& lse, const CascadeOptions& options) {
  const CascadeCall call = resolve_cascade(ctx, q, cache, levels, params, out, lse, options);
  const AttentionProblem& base = call.base;
  const std::vector<LevelPlan>& plans = call.plans;
  const std::vector<std::int64_t>& total = call.total;
  const std::int64_t S = base.num_seqs;
  if (call.on_gpu) {
#if PAGEDATTN_WITH_CUDA
    const cuda::ScopedDevice on_device(ctx.device.index);
    const GpuCascade g = plan_on_gpu(ctx, base, levels, call.checked, plans);
    cuda::cascade_decode(base, g.descs, g.plan, ctx.workspace.data(), ctx.workspace.size(), ctx.stream);
#endif
    return;
  }

  // All checks passed: compute each level's partial state, then merge with the sinks.
  const std::int64_t Hq = base.num_q_heads, D = base.head_dim;
  std::vector<float> part_v(levels.size() * static_cast<std::size_t>(S * Hq * D));
  std::vector<float> part_lse(levels.size() * static_cast<std::size_t>(S * Hq));
  std::vector<std::int64_t> key_offset(static_cast<std::size_t>(S), 0);
  std::vector<cpu::StateView> states;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    float* v = part_v.data() + l * static_cast<std::size_t>(S * Hq * D);
    float* l_lse = part_lse.data() + l * static_cast<std::size_t>(S * Hq);
    run_level(ctx, base, plans[l], key_offset, total, v, l_lse);
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int32_t r = plans[l].seq_to_row[static_cast<std::size_t>(s)];
      if (r >= 0) key_offset[static_cast<std::size_t>(s)] += plans[l].table.row(r).kv_len;
    }
    states.push_back({reinterpret_cast<std::byte*>(v), DType::kF32, Hq * D, D, l_lse, Hq, 1});
  }
  const cpu::StateView final_state{base.qo.out, base.qo.out_dtype, base.qo.out_token_stride,
                                   base.qo.out_head_stride, base.qo.lse, base.qo.lse_token_stride,
                                   base.qo.lse_head_stride};
  cpu::merge_states(states, final_state, base.variant.sinks, S, Hq, D, ctx.num_threads);
}

std::size_t cascade_decode_workspace_bytes(const Context& ctx, const TensorView& q, const PagedKV& cache,
                                           std::span<const CascadeLevel> levels, const AttentionParams& params,
                                           const TensorView& out, const TensorView& lse,
                                           const CascadeOptions& options) {
  const CascadeCall call = resolve_cascade(ctx, q, cache, levels, params, out, lse, options);
  if (!call.on_gpu) return 0;
#if PAGEDATTN_WITH_CUDA
  const cuda::ScopedDevice on_device(ctx.device.index);
  return plan_on_gpu(ctx, call.base, levels, call.checked, call.plans).plan.workspace_bytes;
#else
  return 0;
#endif
}

}  // namespace pagedattn
