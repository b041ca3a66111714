#include "core/validate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <variant>

#include "core/overlap.h"
#include "pagedattn/error.h"

namespace pagedattn::detail {

namespace {
std::string dtype_list(std::initializer_list<DType> allowed) {
  std::string s;
  for (DType t : allowed) s += (s.empty() ? "" : "|") + std::string(to_string(t));
  return s;
}
std::string str(std::int64_t v) { return std::to_string(v); }

// An empty block table may come with a null pointer, but a null block_table is how
// PageTableAccess tells CSR apart: such tables point at this instead (never dereferenced, as
// no row has a page; on a GPU too).
constexpr std::int32_t kNoPages = -1;

}  // namespace

std::string shape_of(const TensorView& t) { return t.describe(); }

void check_tensor(const Context& ctx, const TensorView& t, std::string_view name,
                  std::initializer_list<DType> allowed, int rank) {
  const std::string n(name);
  check_arg(t.defined(), [&] { return n + " is required but was not given"; });
  check_arg(t.device() == ctx.device,
            [&] { return n + " is on " + to_string(t.device()) + " but the op runs on " + to_string(ctx.device); });
  check_arg(std::find(allowed.begin(), allowed.end(), t.dtype()) != allowed.end(), [&] {
    return n + " has dtype " + std::string(to_string(t.dtype())) + ", expected " + dtype_list(allowed);
  });
  check_arg(t.rank() == rank, [&] {
    return n + " has rank " + str(t.rank()) + ", expected " + str(rank) + " (got " + t.describe() + ")";
  });
  for (int d = 0; d < rank; ++d) {
    check_arg(t.size(d) >= 0, [&] { return n + " has a negative size in dimension " + str(d); });
  }
  if (t.numel() > 0) {
    check_arg(t.data() != nullptr, [&] { return n + " has " + str(t.numel()) + " elements but a null pointer"; });
    check_arg(reinterpret_cast<std::uintptr_t>(t.data()) % dtype_size(t.dtype()) == 0,
              [&] { return n + " is not aligned to its element size"; });
  }
}

void check_distinct_elements(const TensorView& t, std::string_view name) {
  check_arg(elements_distinct(t),
            [&] { return std::string(name) + " addresses some elements twice (got " + t.describe() + ")"; });
}

void check_dim(const TensorView& t, std::string_view name, int dim, std::int64_t expected,
               std::string_view what) {
  check_arg(t.size(dim) == expected, [&] {
    return std::string(name) + " dimension " + str(dim) + " (" + std::string(what) + ") is " + str(t.size(dim)) +
           ", expected " + str(expected) + " (got " + t.describe() + ")";
  });
}

void check_head_dim(std::int64_t head_dim, std::string_view name) {
  check_supported(head_dim > 0 && head_dim % 8 == 0 && head_dim <= kMaxHeadDim, [&] {
    return std::string(name) + ": head_dim " + str(head_dim) +
           " is not supported (expected a multiple of 8 in [8, 256])";
  });
}

void check_heads(std::int64_t num_q_heads, std::int64_t num_kv_heads, std::string_view name) {
  check_arg(num_kv_heads > 0 && num_q_heads > 0 && num_q_heads % num_kv_heads == 0, [&] {
    return std::string(name) + ": num_q_heads " + str(num_q_heads) + " is not a positive multiple of num_kv_heads " +
           str(num_kv_heads);
  });
}

// ---- cache -----------------------------------------------------------------------------------

namespace {
KVTensorAccess access_of(const TensorView& t, int page_dim, int head_dim_axis, int token_dim,
                         int dim_axis, std::int64_t head_dim) {
  KVTensorAccess a;
  a.data = static_cast<std::byte*>(t.data());
  a.page_stride = t.stride(page_dim);
  a.head_stride = t.stride(head_dim_axis);
  a.token_stride = t.stride(token_dim);
  a.chunk_len = head_dim;
  a.chunk_stride = 0;
  a.elem_stride = t.stride(dim_axis);
  return a;
}
}  // namespace

KVCacheAccess resolve_cache(const Context& ctx, const PagedKV& cache, std::string_view name) {
  const std::string n(name);
  const std::initializer_list<DType> kKVTypes = {DType::kF32, DType::kF16, DType::kBF16,
                                                     DType::kF8E4M3, DType::kF8E5M2};
  const bool split = cache.layout == KVLayout::kVllmSplit;
  check_tensor(ctx, cache.k, n + ".k", kKVTypes, split ? 5 : 4);
  check_tensor(ctx, cache.v, n + ".v", kKVTypes, 4);
  check_arg(cache.k.dtype() == cache.v.dtype(), [&] {
    return n + ".k has dtype " + std::string(to_string(cache.k.dtype())) + " but " + n + ".v has " +
           std::string(to_string(cache.v.dtype()));
  });
  KVCacheAccess kv;
  kv.dtype = cache.k.dtype();
  const TensorView& k = cache.k;
  switch (cache.layout) {
    case KVLayout::kNHD:
      kv.num_pages = k.size(0), kv.page_size = k.size(1), kv.num_kv_heads = k.size(2),
      kv.head_dim = k.size(3);
      kv.k = access_of(k, 0, 2, 1, 3, kv.head_dim);
      kv.v = access_of(cache.v, 0, 2, 1, 3, kv.head_dim);
      break;
    case KVLayout::kHND:
      kv.num_pages = k.size(0), kv.num_kv_heads = k.size(1), kv.page_size = k.size(2),
      kv.head_dim = k.size(3);
      kv.k = access_of(k, 0, 1, 2, 3, kv.head_dim);
      kv.v = access_of(cache.v, 0, 1, 2, 3, kv.head_dim);
      break;
    case KVLayout::kVllmSplit: {
      const std::int64_t x = vllm_split_x(kv.dtype);
      check_arg(k.size(4) == x, [&] {
        return n + ".k (vllm layout) last dimension is " + str(k.size(4)) + ", expected x = 16 bytes = " + str(x) +
               " elements of " + std::string(to_string(kv.dtype));
      });
      kv.num_pages = k.size(0), kv.num_kv_heads = k.size(1), kv.page_size = k.size(3),
      kv.head_dim = k.size(2) * x;
      kv.k = access_of(k, 0, 1, 3, 4, kv.head_dim);
      kv.k.chunk_len = x;
      kv.k.chunk_stride = k.stride(2);
      kv.v = access_of(cache.v, 0, 1, 3, 2, kv.head_dim);
      break;
    }
    default: check_arg(false, n + ".layout is not a known KVLayout");
  }
  check_head_dim(kv.head_dim, n);
  // A page holds at most one sequence's worth of tokens (lengths are 32-bit); the kernels divide
  // by page_size in 32 bits.
  check_arg(kv.page_size >= 1 && kv.page_size <= kMaxSeqLen, [&] {
    return n + " page_size is " + str(kv.page_size) + ", expected in [1, " + str(kMaxSeqLen) + "]";
  });
  check_arg(kv.num_kv_heads >= 1, [&] { return n + " num_kv_heads is " + str(kv.num_kv_heads); });
  // V must describe the same geometry as K.
  const TensorView& v = cache.v;
  const std::int64_t expect_v[4] = {
      kv.num_pages,
      cache.layout == KVLayout::kNHD ? kv.page_size : kv.num_kv_heads,
      cache.layout == KVLayout::kNHD ? kv.num_kv_heads
      : cache.layout == KVLayout::kHND ? kv.page_size : kv.head_dim,
      cache.layout == KVLayout::kVllmSplit ? kv.page_size : kv.head_dim};
  for (int d = 0; d < 4; ++d) check_dim(v, n + ".v", d, expect_v[d], "to match " + n + ".k");
  // Pages are addressed forwards: the kernels compute page and row offsets as unsigned or
  // 31-bit quantities (PyTorch and DLPack views never have negative strides anyway).
  for (auto [t, tn] : {std::pair{&k, ".k"}, std::pair{&v, ".v"}}) {
    for (int d = 0; d < t->rank(); ++d) {
      check_arg(t->size(d) <= 1 || t->stride(d) >= 0, [&] {
        return n + tn + " has a negative stride in dimension " + str(d) + " (got " + t->describe() + ")";
      });
    }
  }
  // Writes (append_kv, copy_blocks, swap_blocks) must land in one place each.
  check_distinct_elements(k, n + ".k");
  check_distinct_elements(v, n + ".v");
  check_arg(!views_overlap(k, v), [&] { return n + ".k and " + n + ".v overlap in memory"; });
  if (is_fp8(kv.dtype)) {
    check_arg(std::isfinite(cache.k_scale) && cache.k_scale > 0,
              [&] { return n + ".k_scale must be finite and > 0, got " + std::to_string(cache.k_scale); });
    check_arg(std::isfinite(cache.v_scale) && cache.v_scale > 0,
              [&] { return n + ".v_scale must be finite and > 0, got " + std::to_string(cache.v_scale); });
    kv.k_scale = cache.k_scale;
    kv.v_scale = cache.v_scale;
    for (auto [t, suffix, dst] : {std::tuple{&cache.k_head_scales, ".k_head_scales", &kv.k_head_scales},
                                  std::tuple{&cache.v_head_scales, ".v_head_scales", &kv.v_head_scales}}) {
      if (!t->defined()) continue;
      const std::string scales = n + suffix;
      check_tensor(ctx, *t, scales, {DType::kF32}, 1);
      check_dim(*t, scales, 0, kv.num_kv_heads, "num_kv_heads");
      check_arg(t->is_contiguous(), [&] { return scales + " must be contiguous"; });
      *dst = t->data_as<const float>();
      // Host scales are checked like the per-tensor ones; a GPU's are not read (no
      // synchronisation per call): there they are the caller's to keep finite and > 0.
      if (t->device().type == DeviceType::kCPU) {
        for (std::int64_t h = 0; h < kv.num_kv_heads; ++h) {
          const float x = (*dst)[h];
          check_arg(std::isfinite(x) && x > 0, [&] {
            return scales + "[" + str(h) + "] must be finite and > 0, got " + std::to_string(x);
          });
        }
      }
    }
  }
  return kv;
}

// ---- page tables -----------------------------------------------------------------------------

PageTableAccess resolve_table(const Context& ctx, const PageTable& table, const KVCacheAccess& kv,
                              std::string_view name) {
  const std::string n(name);
  // Page tables are read on the host to validate them (and, on the CPU, to run).
  const Context host = Context::cpu();
  const Context& where = ctx.device.type == DeviceType::kCPU ? ctx : host;
  PageTableAccess a;
  a.page_size = kv.page_size;
  // A row's page ids: a branch-free scan first (it vectorises: tables of 10^5 ids are checked on
  // every call), the per-entry check with its message only when some id is out of range.
  // One unsigned 32-bit compare per id (a negative id wraps above any limit): 64-bit compares
  // of sign-extended ids do not vectorise on the baseline x86-64 target.
  const auto page_limit = static_cast<std::uint32_t>(std::min<std::int64_t>(kv.num_pages, std::int64_t{1} << 31));
  auto check_pages = [&, page_limit](const std::int32_t* pages, std::int64_t count, std::int64_t stride, std::int64_t row) {
    std::uint32_t bad = 0;
    if (stride == 1) {  // the common case, kept apart so that it vectorises
      for (std::int64_t j = 0; j < count; ++j) bad |= static_cast<std::uint32_t>(static_cast<std::uint32_t>(pages[j]) >= page_limit);
    } else {
      for (std::int64_t j = 0; j < count; ++j) bad |= static_cast<std::uint32_t>(static_cast<std::uint32_t>(pages[j * stride]) >= page_limit);
    }
    if (!bad) return;
    for (std::int64_t j = 0; j < count; ++j) {
      const std::int64_t page = pages[j * stride];
      check_arg(page >= 0 && page < kv.num_pages, [&] {
        return n + ": page id " + str(page) + " (row " + str(row) + ", page " + str(j) +
            ") is out of range [0, " + str(kv.num_pages) + ")";
      });
    }
  };
  if (const auto* bt = std::get_if<BlockTable>(&table)) {
    check_tensor(where, bt->block_table, n + ".block_table", {DType::kI32}, 2);
    check_tensor(where, bt->seq_lens, n + ".seq_lens", {DType::kI32}, 1);
    a.num_rows = bt->block_table.size(0);
    check_dim(bt->seq_lens, n + ".seq_lens", 0, a.num_rows, "num_seqs");
    a.block_table = bt->block_table.data_as<const std::int32_t>();
    if (a.block_table == nullptr) a.block_table = &kNoPages;
    a.bt_row_stride = bt->block_table.stride(0);
    a.bt_col_stride = bt->block_table.stride(1);
    a.bt_cols = bt->block_table.size(1);
    a.seq_lens = bt->seq_lens.data_as<const std::int32_t>();
    a.seq_lens_stride = bt->seq_lens.stride(0);
    const std::int64_t max_pages = a.bt_cols;
    for (std::int64_t r = 0; r < a.num_rows; ++r) {
      const std::int64_t len = a.seq_lens[r * a.seq_lens_stride];
      check_arg(len >= 0, [&] {
        return n + ".seq_lens[" + str(r) + "] is " + str(len) + ", expected >= 0";
      });
      check_arg(len <= max_pages * kv.page_size, [&] {
        return n + ".seq_lens[" + str(r) + "] is " + str(len) + " but the table holds only " + str(max_pages) +
            " pages of " + str(kv.page_size) + " tokens";
      });
      const SeqPages row = a.row(r);
      check_pages(row.pages, (len + kv.page_size - 1) / kv.page_size, row.stride, r);
    }
    return a;
  }
  const auto& csr = std::get<CsrPageTable>(table);
  check_tensor(where, csr.indptr, n + ".indptr", {DType::kI32}, 1);
  check_tensor(where, csr.indices, n + ".indices", {DType::kI32}, 1);
  check_tensor(where, csr.last_page_len, n + ".last_page_len", {DType::kI32}, 1);
  check_arg(csr.indptr.size(0) >= 1, [&] { return n + ".indptr must have num_seqs + 1 >= 1 entries"; });
  for (auto [t, tn] : {std::pair{&csr.indptr, ".indptr"}, std::pair{&csr.indices, ".indices"},
                       std::pair{&csr.last_page_len, ".last_page_len"}}) {
    check_arg(t->is_contiguous(), [&] { return n + tn + " must be contiguous"; });
  }
  a.num_rows = csr.indptr.size(0) - 1;
  check_dim(csr.last_page_len, n + ".last_page_len", 0, a.num_rows, "num_seqs");
  a.indptr = csr.indptr.data_as<const std::int32_t>();
  a.indices = csr.indices.data_as<const std::int32_t>();
  a.last_page_len = csr.last_page_len.data_as<const std::int32_t>();
  check_arg(a.indptr[0] == 0, [&] { return n + ".indptr[0] is " + str(a.indptr[0]) + ", expected 0"; });
  for (std::int64_t r = 0; r < a.num_rows; ++r) {
    const std::int64_t begin = a.indptr[r], end = a.indptr[r + 1];
    check_arg(end >= begin, [&] {
      return n + ".indptr is decreasing at " + str(r + 1);
    });
    check_arg(end <= csr.indices.size(0), [&] {
      return n + ".indptr[" + str(r + 1) + "] = " + str(end) + " exceeds indices length " +
          str(csr.indices.size(0));
    });
    if (end > begin) {
      const std::int64_t last = a.last_page_len[r];
      check_arg(last >= 1 && last <= kv.page_size, [&] {
        return n + ".last_page_len[" + str(r) + "] is " + str(last) + ", expected [1, " + str(kv.page_size) +
            "]";
      });
      check_arg(csr_length_fits_i32(end - begin, kv.page_size, last), [&] {
        return n + ": sequence " + str(r) + " has " + str((end - begin - 1) * kv.page_size + last) + " tokens (" +
               str(end - begin) + " pages of " + str(kv.page_size) + "), more than 2^31 - 1";
      });
    }
    check_pages(a.indices + begin, end - begin, 1, r);
  }
  return a;
}

PageTableAccess resolve_device_table(const Context& ctx, const PageTable& table,
                                     const PageTable& host_table, const PageTableAccess& host_access,
                                     std::string_view name) {
  const std::string n(name);
  check_arg(table.index() == host_table.index(),
            [&] { return n + " and its host copy use different page-table formats"; });
  auto same_shape = [&](const TensorView& dev, const TensorView& host, const std::string& what) {
    check_tensor(ctx, dev, what, {DType::kI32}, host.rank());
    for (int d = 0; d < host.rank(); ++d) check_dim(dev, what, d, host.size(d), "as in the host copy");
  };
  PageTableAccess a = host_access;
  if (const auto* bt = std::get_if<BlockTable>(&table)) {
    const auto& hb = std::get<BlockTable>(host_table);
    same_shape(bt->block_table, hb.block_table, n + ".block_table");
    same_shape(bt->seq_lens, hb.seq_lens, n + ".seq_lens");
    a.block_table = bt->block_table.data_as<const std::int32_t>();
    if (a.block_table == nullptr) a.block_table = &kNoPages;
    a.bt_row_stride = bt->block_table.stride(0);
    a.bt_col_stride = bt->block_table.stride(1);
    a.seq_lens = bt->seq_lens.data_as<const std::int32_t>();
    a.seq_lens_stride = bt->seq_lens.stride(0);
    return a;
  }
  const auto& csr = std::get<CsrPageTable>(table);
  const auto& hc = std::get<CsrPageTable>(host_table);
  same_shape(csr.indptr, hc.indptr, n + ".indptr");
  same_shape(csr.indices, hc.indices, n + ".indices");
  same_shape(csr.last_page_len, hc.last_page_len, n + ".last_page_len");
  for (auto [t, tn] : {std::pair{&csr.indptr, ".indptr"}, std::pair{&csr.indices, ".indices"},
                       std::pair{&csr.last_page_len, ".last_page_len"}}) {
    check_arg(t->is_contiguous(), [&] { return n + tn + " must be contiguous"; });
  }
  a.indptr = csr.indptr.data_as<const std::int32_t>();
  a.indices = csr.indices.data_as<const std::int32_t>();
  a.last_page_len = csr.last_page_len.data_as<const std::int32_t>();
  return a;
}

// ---- queries and outputs ---------------------------------------------------------------------

QOAccess resolve_qo(const Context& ctx, const TensorView& q, const TensorView& out,
                    const TensorView& lse, std::int64_t num_tokens, std::int64_t num_q_heads,
                    std::int64_t head_dim) {
  const std::initializer_list<DType> kQTypes = {DType::kF32, DType::kF16, DType::kBF16};
  // The CUDA grids put query heads (the split merge) and KV heads (prefill) in grid.y.
  check_supported(ctx.device.type != DeviceType::kCUDA || num_q_heads <= kCudaMaxGridYZ, [&] {
    return "q: attention on CUDA supports at most 65535 query heads, got " + str(num_q_heads);
  });
  check_tensor(ctx, q, "q", kQTypes, 3);
  check_tensor(ctx, out, "out", kQTypes, 3);
  const char* what[3] = {"tokens", "num_q_heads", "head_dim"};
  const std::int64_t expect[3] = {num_tokens, num_q_heads, head_dim};
  for (int d = 0; d < 3; ++d) {
    check_dim(q, "q", d, expect[d], what[d]);
    check_dim(out, "out", d, expect[d], what[d]);
  }
  check_arg(q.stride(2) == 1 || head_dim == 1,
            [&] { return "q must be contiguous along head_dim (stride " + str(q.stride(2)) + ")"; });
  check_arg(out.stride(2) == 1 || head_dim == 1,
            [&] { return "out must be contiguous along head_dim (stride " + str(out.stride(2)) + ")"; });
  QOAccess a;
  a.q = static_cast<const std::byte*>(q.data());
  a.q_dtype = q.dtype();
  a.q_token_stride = q.stride(0);
  a.q_head_stride = q.stride(1);
  a.out = static_cast<std::byte*>(out.data());
  a.out_dtype = out.dtype();
  a.out_token_stride = out.stride(0);
  a.out_head_stride = out.stride(1);
  // Every output element is written once, and no output overwrites q before it is read;
  // out may be q itself (the same view: each query's output replaces it).
  check_distinct_elements(out, "out");
  check_arg(same_view(q, out) || !views_overlap(q, out),
            [&] { return "out overlaps q in memory (only out == q, the same view, is allowed)"; });
  if (lse.defined()) {
    check_tensor(ctx, lse, "lse", {DType::kF32}, 2);
    check_dim(lse, "lse", 0, num_tokens, "tokens");
    check_dim(lse, "lse", 1, num_q_heads, "num_q_heads");
    check_distinct_elements(lse, "lse");
    check_arg(!views_overlap(lse, out), [&] { return "lse overlaps out in memory"; });
    check_arg(!views_overlap(lse, q), [&] { return "lse overlaps q in memory"; });
    a.lse = lse.data_as<float>();
    a.lse_token_stride = lse.stride(0);
    a.lse_head_stride = lse.stride(1);
  }
  return a;
}

std::string NamedView::full_name() const {
  return level < 0 ? std::string(name) : "levels[" + std::to_string(level) + "]." + std::string(name);
}

void add_table_inputs(std::vector<NamedView>& inputs, const PageTable& table, int level) {
  if (const auto* bt = std::get_if<BlockTable>(&table)) {
    inputs.push_back({&bt->block_table, "table.block_table", level});
    inputs.push_back({&bt->seq_lens, "table.seq_lens", level});
  } else if (const auto* csr = std::get_if<CsrPageTable>(&table)) {
    inputs.push_back({&csr->indptr, "table.indptr", level});
    inputs.push_back({&csr->indices, "table.indices", level});
    inputs.push_back({&csr->last_page_len, "table.last_page_len", level});
  }
}

std::vector<NamedView> attention_inputs(const PagedKV& cache, const AttentionParams& params) {
  std::vector<NamedView> inputs = {{&cache.k, "cache.k"},
                                   {&cache.v, "cache.v"},
                                   {&cache.k_head_scales, "cache.k_head_scales"},
                                   {&cache.v_head_scales, "cache.v_head_scales"},
                                   {&params.alibi_slopes, "params.alibi_slopes"},
                                   {&params.sinks, "params.sinks"}};
  inputs.reserve(16);  // room for a table's, or a few cascade levels', without reallocating
  return inputs;
}

void check_apart(std::span<const NamedView> a, std::span<const NamedView> b) {
  for (const NamedView& x : a) {
    if (!x.view->defined()) continue;
    for (const NamedView& y : b) {
      if (!y.view->defined()) continue;
      check_arg(!views_overlap(*x.view, *y.view), [&] { return x.full_name() + " overlaps " + y.full_name() + " in memory"; });
    }
  }
}

void check_outputs_apart(const TensorView& out, const TensorView& lse, std::span<const NamedView> inputs) {
  check_apart(std::initializer_list<NamedView>{{&out, "out"}, {&lse, "lse"}}, inputs);
}

void check_workspace_apart(const Context& ctx, const TensorView& q, const TensorView& out, const TensorView& lse,
                           std::span<const NamedView> views) {
  if (ctx.workspace.empty()) return;
  // The scratch as a tensor of one-byte elements (the dtype only sets the element size).
  const TensorView ws(ctx.workspace.data(), DType::kF8E4M3, {static_cast<std::int64_t>(ctx.workspace.size())},
                      ctx.device);
  const std::initializer_list<NamedView> scratch = {{&ws, "ctx.workspace"}};
  check_apart(scratch, views);
  check_apart(scratch, std::initializer_list<NamedView>{{&q, "q"}, {&out, "out"}, {&lse, "lse"}});
}

AttentionVariant resolve_variant(const Context& ctx, const AttentionParams& params,
                                 std::int64_t num_q_heads, std::int64_t head_dim) {
  AttentionVariant v;
  check_arg(std::isfinite(params.scale) && params.scale >= 0, [&] {
    return "params.scale must be finite and >= 0 (0 = 1/sqrt(head_dim)), got " + std::to_string(params.scale);
  });
  v.scale = params.scale > 0 ? params.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  v.causal = params.causal;
  check_arg(params.window_left >= -1,
            [&] { return "params.window_left must be >= 0, or -1 for none; got " + str(params.window_left); });
  v.window_left = params.window_left;
  check_arg(std::isfinite(params.logits_soft_cap) && params.logits_soft_cap >= 0, [&] {
    return "params.logits_soft_cap must be finite and >= 0, got " + std::to_string(params.logits_soft_cap);
  });
  v.soft_cap = params.logits_soft_cap;
  for (auto [t, name, dst] : {std::tuple{&params.alibi_slopes, "params.alibi_slopes", &v.alibi_slopes},
                              std::tuple{&params.sinks, "params.sinks", &v.sinks}}) {
    if (!t->defined()) continue;
    check_tensor(ctx, *t, name, {DType::kF32}, 1);
    check_dim(*t, name, 0, num_q_heads, "num_q_heads");
    check_arg(t->is_contiguous(), [&] { return std::string(name) + " must be contiguous"; });
    *dst = t->data_as<const float>();
  }
  return v;
}

}  // namespace pagedattn::detail
