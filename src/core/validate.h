// Internal: argument checks shared by the ops. Each resolve_* function checks everything about
// its arguments (device, dtype, rank, shape, pointers, then index ranges) and throws
// pagedattn::Error naming the argument; it reads but never writes.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/problem.h"
#include "pagedattn/attention_params.h"
#include "pagedattn/context.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/page_table.h"

namespace pagedattn::detail {

constexpr std::int64_t kMaxHeadDim = 256;

// Basic checks of one tensor argument: present, on ctx's device, dtype in `allowed`, rank,
// non-null data when non-empty, element-aligned.
void check_tensor(const Context& ctx, const TensorView& t, std::string_view name,
                  std::initializer_list<DType> allowed, int rank);
// Checks that no two elements of t share memory (an output or a cache written through t would
// take racing or lost writes); `name` leads the message.
void check_distinct_elements(const TensorView& t, std::string_view name);
// The longest sequence: the kernels and a block table's i32 seq_lens hold lengths in 32 bits.
constexpr std::int64_t kMaxSeqLen = 2147483647;
// Whether a CSR row of `pages` pages (>= 1), the last holding `last_page_len` tokens, is at most
// kMaxSeqLen tokens long, computed without overflow for any page size.
inline bool csr_length_fits_i32(std::int64_t pages, std::int64_t page_size, std::int64_t last_page_len) {
  return pages - 1 <= (kMaxSeqLen - last_page_len) / page_size;
}
// Checks t.size(dim) == expected.
void check_dim(const TensorView& t, std::string_view name, int dim, std::int64_t expected,
               std::string_view what);

// `name` prefixes error messages ("cache.k has dtype ...").
KVCacheAccess resolve_cache(const Context& ctx, const PagedKV& cache, std::string_view name = "cache");

// Validates the table against the cache (page ids in [0, num_pages) for every page a sequence
// uses, lengths within the pages given). `name` prefixes error messages.
PageTableAccess resolve_table(const Context& ctx, const PageTable& table, const KVCacheAccess& kv,
                              std::string_view name = "table");

// A page table on a GPU, checked against its validated host copy (same format, same shapes);
// never reads the device memory.
PageTableAccess resolve_device_table(const Context& ctx, const PageTable& table,
                                     const PageTable& host_table, const PageTableAccess& host_access,
                                     std::string_view name = "table");

// q/out: [num_tokens, num_q_heads, head_dim] with a contiguous last dimension; lse optional.
QOAccess resolve_qo(const Context& ctx, const TensorView& q, const TensorView& out,
                    const TensorView& lse, std::int64_t num_tokens, std::int64_t num_q_heads,
                    std::int64_t head_dim);

AttentionVariant resolve_variant(const Context& ctx, const AttentionParams& params,
                                 std::int64_t num_q_heads, std::int64_t head_dim);

// An input an op reads while it writes its outputs, with its name for messages: `name`, after
// "levels[<level>]." for a cascade level's tensors. Names are literals, and the message is
// built only when a check fails (no allocation per call on the ops' host path).
struct NamedView {
  const TensorView* view = nullptr;
  std::string_view name;
  int level = -1;
  std::string full_name() const;
};
// The tensors of a cache and of the attention parameters, named as the ops name them; a page
// table's are added by add_table_inputs ("table.*", or "levels[<level>].table.*" for a cascade
// level). Views that are not defined are skipped by the checks.
std::vector<NamedView> attention_inputs(const PagedKV& cache, const AttentionParams& params);
void add_table_inputs(std::vector<NamedView>& inputs, const PageTable& table, int level = -1);
// Rejects a view of `a` that shares memory with a view of `b` ("<a> overlaps <b> in memory").
void check_apart(std::span<const NamedView> a, std::span<const NamedView> b);
// Rejects an output (out, lse; `lse` may be undefined) that shares memory with one of `inputs`:
// the kernels would write bytes that other threads are still reading (a cache, a page table's
// ids, a parameter). q's rules are resolve_qo's.
void check_outputs_apart(const TensorView& out, const TensorView& lse, std::span<const NamedView> inputs);
// Rejects a ctx.workspace (when given) that shares memory with one of `views` (an op's inputs
// and outputs): the scratch the op writes would overwrite them. q, out and lse are added here.
void check_workspace_apart(const Context& ctx, const TensorView& q, const TensorView& out, const TensorView& lse,
                           std::span<const NamedView> views);

void check_head_dim(std::int64_t head_dim, std::string_view name);
void check_heads(std::int64_t num_q_heads, std::int64_t num_kv_heads, std::string_view name);

std::string shape_of(const TensorView& t);

}  // namespace pagedattn::detail
