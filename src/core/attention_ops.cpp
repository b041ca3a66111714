// decode and prefill: validate, resolve into an AttentionProblem, dispatch.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/backend_select.h"
#include "core/find_prefixes.h"
#include "core/validate.h"
#include "cpu/cpu_backend.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"
#include "pagedattn/shared_prefix.h"

#if PAGEDATTN_WITH_CUDA
#include "cuda/cascade.h"
#include "cuda/decode.h"
#include "cuda/prefill.h"
#include "cuda/scoped_device.h"
#endif

namespace pagedattn {

namespace {
detail::AttentionProblem resolve_common(const Context& ctx, const TensorView& q,
                                        const PagedKV& cache, const PageTable& table,
                                        const AttentionParams& params, const TensorView& out,
                                        const TensorView& lse, std::int64_t num_tokens,
                                        std::string_view table_name) {
  detail::AttentionProblem p;
  p.kv = detail::resolve_cache(ctx, cache);
  check_arg(q.rank() == 3,
            [&] { return "q has rank " + std::to_string(q.rank()) + ", expected 3 [tokens, num_q_heads, head_dim]"; });
  p.num_q_heads = q.size(1);
  p.num_kv_heads = p.kv.num_kv_heads;
  p.head_dim = p.kv.head_dim;
  detail::check_heads(p.num_q_heads, p.num_kv_heads, "q");
  p.qo = detail::resolve_qo(ctx, q, out, lse, num_tokens, p.num_q_heads, p.head_dim);
  p.variant = detail::resolve_variant(ctx, params, p.num_q_heads, p.head_dim);
  p.table = detail::resolve_table(ctx, table, p.kv, table_name);
  return p;
}


// Whether decode should look for shared prefixes: the options allow it, the variant does not
// depend on positions, and at least two sequences start with the same full page (a cheap test
// that keeps the search off the common path). p.table is the validated host table.
bool cascade_candidate(const Context& ctx, const detail::AttentionProblem& p, const DecodeOptions& options) {
  if (!options.cascade || options.variant != DecodeVariant::kAuto || options.partition_size != 0) return false;
  if (ctx.implementation == Implementation::kReference) return false;
  if (p.variant.alibi_slopes != nullptr || p.variant.window_left >= 0) return false;
  std::vector<std::int32_t> first_pages;
  for (std::int64_t s = 0; s < p.num_seqs; ++s) {
    const detail::SeqPages row = p.table.row(s);
    if (row.kv_len >= p.kv.page_size) first_pages.push_back(static_cast<std::int32_t>(row.page(0)));
  }
  std::ranges::sort(first_pages);
  return std::ranges::adjacent_find(first_pages) != first_pages.end();
}

}  // namespace

namespace {

// decode's arguments, validated: the problem over the validated host table and, on CUDA, the
// device table checked against it.
struct DecodeCall {
  detail::AttentionProblem p;
  detail::PageTableAccess host_access, device_access;
  bool on_gpu = false;
};

DecodeCall resolve_decode(const Context& ctx, const TensorView& q, const PagedKV& cache, const PageTable& table,
                          const AttentionParams& params, const TensorView& out, const TensorView& lse,
                          const DecodeOptions& options) {
  detail::require_backend(ctx, "decode");
  check_arg(q.rank() >= 1, "q has rank 0, expected 3 [num_seqs, num_q_heads, head_dim]");
  DecodeCall c;
  c.on_gpu = ctx.device.type == DeviceType::kCUDA;
  check_arg(!c.on_gpu || options.host_table != nullptr, [&] {
    return "options.host_table is required on CUDA: a host copy of the page table, used to "
           "validate it and plan the launch without reading GPU memory";
  });
  // The table whose values are checked and searched: the host copy on CUDA.
  const PageTable& checked_table = c.on_gpu ? *options.host_table : table;
  detail::AttentionProblem& p = c.p;
  p = resolve_common(ctx, q, cache, checked_table, params, out, lse, q.size(0),
                     c.on_gpu ? "options.host_table" : "table");
  p.num_seqs = p.table.num_rows;
  check_arg(q.size(0) == p.num_seqs, [&] {
    return "q has " + std::to_string(q.size(0)) + " sequences but the page table has " + std::to_string(p.num_seqs);
  });
  // The CUDA grids put sequences in grid.z; checked here, before the cascade path uploads anything.
  check_supported(!c.on_gpu || p.num_seqs <= detail::kCudaMaxGridYZ, [&] {
    return "decode on CUDA supports at most 65535 sequences per call, got " + std::to_string(p.num_seqs);
  });
  p.variant.causal = false;  // the single query is the last position: nothing lies after it
  check_arg(options.partition_size >= 0 && options.partition_size % p.kv.page_size == 0, [&] {
    return "options.partition_size " + std::to_string(options.partition_size) +
           " must be 0 (planner) or a positive multiple of page_size " + std::to_string(p.kv.page_size);
  });
  check_arg(options.cascade_min_saved_tokens >= 0, [&] {
    return "options.cascade_min_saved_tokens is " + std::to_string(options.cascade_min_saved_tokens) +
           ", expected >= 0";
  });
  // The device table is checked against its host copy before either path runs.
  c.host_access = p.table;
  c.device_access = c.on_gpu ? detail::resolve_device_table(ctx, table, *options.host_table, p.table) : p.table;
  std::vector<detail::NamedView> inputs = detail::attention_inputs(cache, params);
  detail::add_table_inputs(inputs, table);
  detail::check_outputs_apart(out, lse, inputs);
  if (c.on_gpu) detail::check_workspace_apart(ctx, q, out, lse, inputs);
  return c;
}

#if PAGEDATTN_WITH_CUDA
// The plain (not cascaded) CUDA decode of a resolved call: its plan, from the host lengths, and
// the problem over the device table.
cuda::DecodePlan plan_plain(DecodeCall& c, const DecodeOptions& options, int device) {
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(c.p.num_seqs));
  for (std::int64_t s = 0; s < c.p.num_seqs; ++s) lengths[static_cast<std::size_t>(s)] = c.host_access.row(s).kv_len;
  c.p.table = c.device_access;  // the kernels read the device table
  return cuda::plan_decode(c.p, lengths.data(), options, device);
}
#endif

}  // namespace

void decode(const Context& ctx, const TensorView& q, const PagedKV& cache, const PageTable& table,
            const AttentionParams& params, const TensorView& out, const TensorView& lse,
            const DecodeOptions& options) {
  DecodeCall c = resolve_decode(ctx, q, cache, table, params, out, lse, options);
  const detail::AttentionProblem& p = c.p;
  const bool on_gpu = c.on_gpu;
#if PAGEDATTN_WITH_CUDA
  std::optional<cuda::ScopedDevice> on_device;
  if (on_gpu) on_device.emplace(ctx.device.index);
  const bool capturing = on_gpu && cuda::stream_is_capturing(ctx.stream);
#else
  const bool capturing = false;
#endif
  if (!capturing && cascade_candidate(ctx, p, options)) {
    // p.table is the validated host table: searched in place.
    CascadeLayout layout = detail::find_shared_prefixes(p.table, {options.cascade_min_saved_tokens});
    if (layout.shared_levels() > 0) {
      if (!on_gpu) return cascade_decode(ctx, q, cache, layout.views(), params, out, lse);
#if PAGEDATTN_WITH_CUDA
      if (cuda::decode_as_cascade(p, layout, ctx.device.index, ctx.workspace.data(), ctx.workspace.size(),
                                  ctx.stream)) {
        return;
      }
#endif
    }
  }
  if (on_gpu) {
#if PAGEDATTN_WITH_CUDA
    const cuda::DecodePlan plan = plan_plain(c, options, ctx.device.index);
    cuda::decode(c.p, plan, ctx.workspace.data(), ctx.workspace.size(), ctx.stream);
#endif
    return;
  }
  if (ctx.implementation == Implementation::kReference) return cpu::reference_attention(p);
  cpu::decode(p, options, ctx.num_threads);
}

std::size_t decode_workspace_bytes(const Context& ctx, const TensorView& q, const PagedKV& cache,
                                   const PageTable& table, const AttentionParams& params, const TensorView& out,
                                   const TensorView& lse, const DecodeOptions& options) {
  DecodeCall c = resolve_decode(ctx, q, cache, table, params, out, lse, options);
  if (!c.on_gpu) return 0;
#if PAGEDATTN_WITH_CUDA
  const cuda::ScopedDevice on_device(ctx.device.index);
  return plan_plain(c, options, ctx.device.index).workspace_bytes;
#else
  return 0;
#endif
}

namespace {

// prefill's arguments, validated: the problem (on CUDA over the device table and qo_indptr) and
// the most queries of one sequence.
struct PrefillCall {
  detail::AttentionProblem p;
  std::int64_t max_q = 0;
  bool on_gpu = false;
};

PrefillCall resolve_prefill(const Context& ctx, const TensorView& q, const TensorView& qo_indptr,
                            const PagedKV& cache, const PageTable& table, const AttentionParams& params,
                            const TensorView& out, const TensorView& lse, const PrefillOptions& options) {
  detail::require_backend(ctx, "prefill");
  check_arg(q.rank() >= 1, "q has rank 0, expected 3 [total_q, num_q_heads, head_dim]");
  PrefillCall c;
  const bool on_gpu = c.on_gpu = ctx.device.type == DeviceType::kCUDA;
  check_arg(!on_gpu || (options.host_table != nullptr && options.host_qo_indptr.defined()), [&] {
    return "options.host_table and options.host_qo_indptr are required on CUDA: host copies of the "
           "page table and of qo_indptr, used to validate them and size the launch without reading "
           "GPU memory";
  });
  detail::AttentionProblem& p = c.p;
  p = resolve_common(ctx, q, cache, on_gpu ? *options.host_table : table, params, out, lse, q.size(0),
                     on_gpu ? "options.host_table" : "table");
  p.num_seqs = p.table.num_rows;
  // qo_indptr is checked on the host: the CPU op's own tensor, or the CUDA op's host copy.
  const TensorView& host_indptr = on_gpu ? options.host_qo_indptr : qo_indptr;
  const std::string indptr_name = on_gpu ? "options.host_qo_indptr" : "qo_indptr";
  detail::check_tensor(Context::cpu(), host_indptr, indptr_name, {DType::kI32}, 1);
  detail::check_dim(host_indptr, indptr_name, 0, p.num_seqs + 1, "num_seqs + 1");
  check_arg(host_indptr.is_contiguous(), [&] { return indptr_name + " must be contiguous"; });
  const auto* indptr = host_indptr.data_as<const std::int32_t>();
  check_arg(indptr[0] == 0, [&] { return indptr_name + "[0] is " + std::to_string(indptr[0]) + ", expected 0"; });
  for (std::int64_t s = 0; s < p.num_seqs; ++s) {
    const std::int64_t n_q = indptr[s + 1] - indptr[s];
    check_arg(n_q >= 0, [&] {
      return indptr_name + " is decreasing at " + std::to_string(s + 1);
    });
    const std::int64_t kv_len = p.table.row(s).kv_len;
    check_arg(n_q <= kv_len, [&] {
      return "sequence " + std::to_string(s) + " has " + std::to_string(n_q) + " queries but only " +
          std::to_string(kv_len) + " tokens of KV (queries must already be in the cache)";
    });
    c.max_q = std::max(c.max_q, n_q);
  }
  check_arg(indptr[p.num_seqs] == q.size(0), [&] {
    return indptr_name + "[num_seqs] is " + std::to_string(indptr[p.num_seqs]) + " but q has " +
           std::to_string(q.size(0)) + " tokens";
  });
  std::vector<detail::NamedView> inputs = detail::attention_inputs(cache, params);
  detail::add_table_inputs(inputs, table);
  inputs.push_back({&qo_indptr, "qo_indptr"});
  detail::check_outputs_apart(out, lse, inputs);
  if (on_gpu) detail::check_workspace_apart(ctx, q, out, lse, inputs);
  if (!on_gpu) {
    p.qo_indptr = indptr;
    return c;
  }
  detail::check_tensor(ctx, qo_indptr, "qo_indptr", {DType::kI32}, 1);
  detail::check_dim(qo_indptr, "qo_indptr", 0, p.num_seqs + 1, "as in the host copy");
  check_arg(qo_indptr.is_contiguous(), "qo_indptr must be contiguous");
  p.table = detail::resolve_device_table(ctx, table, *options.host_table, p.table);
  p.qo_indptr = qo_indptr.data_as<const std::int32_t>();
  return c;
}

}  // namespace

void prefill(const Context& ctx, const TensorView& q, const TensorView& qo_indptr,
             const PagedKV& cache, const PageTable& table, const AttentionParams& params,
             const TensorView& out, const TensorView& lse, const PrefillOptions& options) {
  const PrefillCall c = resolve_prefill(ctx, q, qo_indptr, cache, table, params, out, lse, options);
  if (c.on_gpu) {
#if PAGEDATTN_WITH_CUDA
    const cuda::ScopedDevice on_device(ctx.device.index);
    // What the tensor-core kernels do not take (f32 q, mixed 16-bit dtypes, odd strides) runs
    // as one CUDA-core decode row per query token.
    if (cuda::prefill_unsupported_on(c.p, ctx.device.index).empty()) {
      cuda::prefill(c.p, c.max_q, ctx.stream);
    } else {
      cuda::prefill_by_rows(c.p, q.size(0), ctx.workspace.data(), ctx.workspace.size(), ctx.stream);
    }
#endif
    return;
  }
  if (ctx.implementation == Implementation::kReference) return cpu::reference_attention(c.p);
  cpu::prefill(c.p, ctx.num_threads);
}

std::size_t prefill_workspace_bytes(const Context& ctx, const TensorView& q, const TensorView& qo_indptr,
                                    const PagedKV& cache, const PageTable& table, const AttentionParams& params,
                                    const TensorView& out, const TensorView& lse, const PrefillOptions& options) {
  const PrefillCall c = resolve_prefill(ctx, q, qo_indptr, cache, table, params, out, lse, options);
  if (!c.on_gpu) return 0;
#if PAGEDATTN_WITH_CUDA
  const cuda::ScopedDevice on_device(ctx.device.index);
  if (cuda::prefill_unsupported_on(c.p, ctx.device.index).empty()) return 0;
  return cuda::prefill_by_rows_workspace_bytes(c.p, q.size(0));
#else
  return 0;
#endif
}

}  // namespace pagedattn
