// swap_blocks: whole pages between two caches of one geometry, possibly on different devices
// (swap-out to host memory, swap-in back to a GPU). Everything is validated on the host first;
// then each tensor's pages go over as runs: a run of pairs whose source and destination pages
// both advance by one is one strided copy (memcpy on the CPU, cudaMemcpy2DAsync on CUDA).
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/backend_select.h"
#include "core/dense_pages.h"
#include "core/overlap.h"
#include "core/page_run.h"
#include "core/validate.h"
#include "cpu/cache_writes.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

#if PAGEDATTN_WITH_CUDA
#include "cuda/cache_writes.h"
#include "cuda/scoped_device.h"
#endif

namespace pagedattn {

namespace {

std::string str(std::int64_t x) { return std::to_string(x); }

// The caches' devices against ctx's: a GPU cache must be on ctx's GPU; with both caches in host
// memory ctx is the CPU.
void check_devices(const Context& ctx, const PagedKV& src, const PagedKV& dst) {
  const Device sd = src.k.device(), dd = dst.k.device();
  const bool on_gpu = sd.type == DeviceType::kCUDA || dd.type == DeviceType::kCUDA;
  for (auto [d, name] : {std::pair{sd, "src"}, std::pair{dd, "dst"}}) {
    check_arg(d.type == DeviceType::kCPU || d == ctx.device, [&] {
      return std::string(name) + " is on " + to_string(d) + " but the op runs on " + to_string(ctx.device);
    });
  }
  check_arg(on_gpu || ctx.device.type == DeviceType::kCPU, [&] {
    return "src and dst are in host memory but the op runs on " + to_string(ctx.device) + " (use the CPU context)";
  });
}

// Same element order inside a page (the page strides may differ).
bool same_arrangement(const detail::KVTensorAccess& a, const detail::KVTensorAccess& b) {
  return a.head_stride == b.head_stride && a.token_stride == b.token_stride && a.chunk_stride == b.chunk_stride &&
         a.elem_stride == b.elem_stride && a.chunk_len == b.chunk_len;
}

void check_geometry(const PagedKV& src, const PagedKV& dst, const detail::KVCacheAccess& s,
                    const detail::KVCacheAccess& d) {
  check_arg(src.layout == dst.layout, [&] {
    return "dst has layout " + std::string(to_string(dst.layout)) + " but src has " + std::string(to_string(src.layout));
  });
  check_arg(s.dtype == d.dtype, [&] {
    return "dst has dtype " + std::string(to_string(d.dtype)) + " but src has " + std::string(to_string(s.dtype));
  });
  for (auto [a, b, what] : {std::tuple{s.page_size, d.page_size, "page_size"},
                            std::tuple{s.num_kv_heads, d.num_kv_heads, "num_kv_heads"},
                            std::tuple{s.head_dim, d.head_dim, "head_dim"}}) {
    check_arg(a == b, [&] { return "dst has " + std::string(what) + " " + str(b) + " but src has " + str(a); });
  }
  // Values are copied as stored, so each KV head's scale must be the same in both caches: the
  // per-head one where a cache gives them, else its per-tensor one (per-head K scales say
  // nothing of V's). Per-head scales on a GPU are not read (that would synchronise every call):
  // there they are the caller's to keep alike.
  if (is_fp8(s.dtype)) {
    for (auto [sh, dh, is_v] : {std::tuple{&src.k_head_scales, &dst.k_head_scales, false},
                                std::tuple{&src.v_head_scales, &dst.v_head_scales, true}}) {
      auto host_readable = [](const TensorView* t) { return !t->defined() || t->device().type == DeviceType::kCPU; };
      if (!host_readable(sh) || !host_readable(dh)) continue;
      for (std::int64_t h = 0; h < s.num_kv_heads; ++h) {
        const float sa = is_v ? s.v_scale_of(h) : s.k_scale_of(h), da = is_v ? d.v_scale_of(h) : d.k_scale_of(h);
        check_arg(sa == da, [&] {
          auto name = [&](const TensorView* heads) {
            return heads->defined() ? std::string(is_v ? "v_head_scales[" : "k_head_scales[") + str(h) + "]"
                                    : std::string(is_v ? "v_scale" : "k_scale");
          };
          return "src and dst are fp8 caches with different scales: dst." + name(dh) + " " + std::to_string(da) +
                 " but src." + name(sh) + " " + std::to_string(sa) + " (their stored values would change meaning)";
        });
      }
    }
  }
  for (auto [a, b, name] : {std::tuple{&s.k, &d.k, "K"}, std::tuple{&s.v, &d.v, "V"}}) {
    check_supported(detail::dense_pages(*a, s) && detail::dense_pages(*b, d) && same_arrangement(*a, *b), [&] {
      return std::string("swap_blocks needs every page of ") + name +
             " to be one dense block, arranged alike in src and dst (as make_views / from_stacked give them)";
    });
  }
}

std::vector<std::pair<std::int64_t, std::int64_t>> checked_mapping(const TensorView& m, const detail::KVCacheAccess& s,
                                                                   const detail::KVCacheAccess& d) {
  detail::check_tensor(Context::cpu(), m, "block_mapping", {DType::kI32, DType::kI64}, 2);
  detail::check_dim(m, "block_mapping", 1, 2, "(src, dst)");
  const std::int64_t n = m.size(0);
  auto at = [&](std::int64_t i, std::int64_t j) {
    const std::int64_t e = i * m.stride(0) + j * m.stride(1);
    return m.dtype() == DType::kI32 ? std::int64_t{m.data_as<const std::int32_t>()[e]} : m.data_as<const std::int64_t>()[e];
  };
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs(static_cast<std::size_t>(n));
  std::set<std::int64_t> destinations;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t sp = at(i, 0), dp = at(i, 1);
    check_arg(sp >= 0 && sp < s.num_pages, [&] {
      return "block_mapping[" + str(i) + "] src page " + str(sp) + " is out of range [0, " + str(s.num_pages) + ")";
    });
    check_arg(dp >= 0 && dp < d.num_pages, [&] {
      return "block_mapping[" + str(i) + "] dst page " + str(dp) + " is out of range [0, " + str(d.num_pages) + ")";
    });
    check_arg(destinations.insert(dp).second,
              [&] { return "block_mapping[" + str(i) + "] writes dst page " + str(dp) + " a second time"; });
    pairs[static_cast<std::size_t>(i)] = {sp, dp};
  }
  return pairs;
}

// Memory that the mapping both reads and writes would come out depending on the order of the
// copies (runs go one after another, a run's pages in whatever order the copy
// takes). A page both a source and a destination of one cache is one such case; views of src and
// dst that overlap from different base pointers are another, so the test is on the bytes of the
// pages of K and V that the mapping reads and writes, not on the caches' pointers. (Memory
// written twice cannot occur: destinations are distinct, and resolve_cache rejects pages, or K
// and V, that share memory.)
void check_apart(const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs, const detail::KVCacheAccess& s,
                 const detail::KVCacheAccess& d) {
  const auto esize = static_cast<std::int64_t>(dtype_size(s.dtype));
  const auto page_bytes = static_cast<std::uintptr_t>(s.page_size * s.num_kv_heads * s.head_dim * esize);
  auto bytes_of = [&](const detail::KVTensorAccess& t, std::int64_t page) {
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data + t.offset(page, 0, 0, 0) * esize);
    return detail::ByteRange{begin, begin + page_bytes};
  };
  // Range 2i is pair i's page of K, 2i + 1 its page of V.
  std::vector<detail::ByteRange> reads, writes;
  reads.reserve(2 * pairs.size());
  writes.reserve(2 * pairs.size());
  for (auto [sp, dp] : pairs) {
    reads.push_back(bytes_of(s.k, sp));
    reads.push_back(bytes_of(s.v, sp));
    writes.push_back(bytes_of(d.k, dp));
    writes.push_back(bytes_of(d.v, dp));
  }
  auto page = [&](std::size_t range, bool is_dst) {
    const auto& [sp, dp] = pairs[range / 2];
    return str(is_dst ? dp : sp) + " (" + (range % 2 ? "V" : "K") + ")";
  };
  const auto read_over = detail::find_overlap(writes, reads);
  check_arg(!read_over, [&] {
    const auto [w, r] = *read_over;
    return "block_mapping[" + str(static_cast<std::int64_t>(w / 2)) + "] writes dst page " + page(w, true) +
           " over memory that block_mapping[" + str(static_cast<std::int64_t>(r / 2)) + "] reads as src page " +
           page(r, false) +
           ": memory used both as a source and as a destination would come out depending on the copy order";
  });
}

// Runs of pairs whose source and destination pages both advance by one, per tensor.
std::vector<detail::PageRun> page_runs(const std::vector<std::pair<std::int64_t, std::int64_t>>& pairs,
                                       const detail::KVCacheAccess& s, const detail::KVCacheAccess& d) {
  const auto esize = static_cast<std::int64_t>(dtype_size(s.dtype));
  const std::int64_t page_bytes = s.page_size * s.num_kv_heads * s.head_dim * esize;
  std::vector<detail::PageRun> runs;
  for (std::size_t i = 0; i < pairs.size();) {
    std::size_t j = i + 1;
    while (j < pairs.size() && pairs[j].first == pairs[j - 1].first + 1 && pairs[j].second == pairs[j - 1].second + 1) ++j;
    for (auto [st, dt] : {std::pair{&s.k, &d.k}, std::pair{&s.v, &d.v}}) {
      detail::PageRun r;
      r.src = st->data + st->offset(pairs[i].first, 0, 0, 0) * esize;
      r.dst = dt->data + dt->offset(pairs[i].second, 0, 0, 0) * esize;
      r.bytes = page_bytes;
      r.pages = static_cast<std::int64_t>(j - i);
      // A lone page's pitch is its size: the page stride may be anything there (0 for a cache of
      // one page), and a 2-D copy takes no pitch below its width.
      r.src_pitch = r.pages == 1 ? page_bytes : st->page_stride * esize;
      r.dst_pitch = r.pages == 1 ? page_bytes : dt->page_stride * esize;
      runs.push_back(r);
    }
    i = j;
  }
  return runs;
}

}  // namespace

void swap_blocks(const Context& ctx, const PagedKV& src, const PagedKV& dst, const TensorView& block_mapping) {
  detail::require_backend(ctx, "swap_blocks");
  check_devices(ctx, src, dst);
  const detail::KVCacheAccess s = detail::resolve_cache(Context{src.k.device()}, src, "src");
  const detail::KVCacheAccess d = detail::resolve_cache(Context{dst.k.device()}, dst, "dst");
  check_geometry(src, dst, s, d);
  const std::vector<std::pair<std::int64_t, std::int64_t>> pairs = checked_mapping(block_mapping, s, d);
  check_apart(pairs, s, d);
  const std::vector<detail::PageRun> runs = page_runs(pairs, s, d);
  if (runs.empty()) return;
  if (ctx.device.type == DeviceType::kCUDA) {
#if PAGEDATTN_WITH_CUDA
    const cuda::ScopedDevice on_device(ctx.device.index);
    cuda::copy_page_runs(runs, ctx.stream);
#endif
    return;
  }
  cpu::copy_page_runs(runs);
}

}  // namespace pagedattn
