// Paged read probe: how fast the simplest kernel reads exactly a decode shape's valid K/V bytes
// through its page table (16-byte loads, streaming unless --loads says otherwise; nothing else:
// no attention, no pipeline, no merge), with the page ids shuffled as the benchmarks shuffle them
// or in order, for page sizes and layouts chosen on the command line, next to the same loads over
// one flat buffer of the same size. The rates of one run separate what scattered pages cost the
// memory system from what a decode kernel adds to it. Not a benchmark of record: `pagedattn bench
// decode` is (docs/perf-notes.md). One JSON record per line on stdout.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "benchmarks.h"
#include "cuda_bench_util.h"

namespace {

using pagedattn::bench::Gpu;
using pagedattn::bench::ok;

// One head's row of a token: 16 x 16 bytes (head_dim 128 in bf16) or, with --row-bytes 128,
// 8 x 16 bytes (head_dim 128 in fp8, whose reads the fp8 decode must match).
constexpr int kLoadsPerTile = 8;  // a warp's loads at once, per lane: 8 for K and 8 for V (16 or 32 rows)

struct ProbeArgs {
  const uint4* k;
  const uint4* v;
  const std::int32_t* table;  // [seqs, max_pages]
  std::int64_t max_pages;
  int seq_len, page_size, kv_heads, tokens_per_cta, splits, row_vecs;
  bool hnd;
  std::uint32_t* sink;  // one word per CTA, so that no load is dead code
};

__device__ std::int64_t row_offset(const ProbeArgs& a, int seq, int head, int token) {
  const std::int64_t page = a.table[seq * a.max_pages + token / a.page_size];
  const int slot = token % a.page_size;
  const std::int64_t row = a.hnd ? (page * a.kv_heads + head) * a.page_size + slot
                                 : (page * a.page_size + slot) * a.kv_heads + head;
  return row * a.row_vecs;
}

__device__ std::uint32_t fold(uint4 x) { return x.x ^ x.y ^ x.z ^ x.w; }

// How the reader's 16-byte loads treat L2 (--loads): streaming (ld.global.cs), plain, or plain
// under an L2 evict-first or evict-normal cache policy. The decode's TMA boxes carry evict-first.
enum LoadKind { kStreaming, kPlain, kEvictFirst, kEvictNormal };

template <int kLoads>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  uint4 x;
  if constexpr (kLoads == kStreaming) {
    x = __ldcs(p);
  } else if constexpr (kLoads == kPlain) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w) : "l"(p));
  } else {
    std::uint64_t policy;
    if constexpr (kLoads == kEvictFirst) {
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    } else {
      asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(policy));
    }
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
                 : "l"(p), "l"(policy));
  }
  return x;
}

// CTA = one split of one (sequence, KV head) row, as the decode's CTAs are; warp w loads the
// split's tiles w, w + warps, ...; lane l the 16-byte piece l % kRowVecs of row
// (32 / kRowVecs) i + l / kRowVecs. A tile has the same bytes whatever the row's size.
template <int kLoads, int kRowVecs>
__global__ void read_pages(ProbeArgs a) {
  constexpr int kRowsPerLoad = 32 / kRowVecs, kTile = kLoadsPerTile * kRowsPerLoad;
  const int unit = blockIdx.x / a.splits, split = blockIdx.x % a.splits;
  const int seq = unit / a.kv_heads, head = unit % a.kv_heads;
  const int t0 = split * a.tokens_per_cta, t1 = min(a.seq_len, t0 + a.tokens_per_cta);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  std::uint32_t acc = 0;
  for (int tile = t0 + warp * kTile; tile < t1; tile += warps * kTile) {
    uint4 k[kLoadsPerTile], v[kLoadsPerTile];
#pragma unroll
    for (int i = 0; i < kLoadsPerTile; ++i) {
      const int token = tile + kRowsPerLoad * i + lane / kRowVecs;
      if (token < t1) {
        const std::int64_t off = row_offset(a, seq, head, token) + lane % kRowVecs;
        k[i] = load16<kLoads>(a.k + off);
        v[i] = load16<kLoads>(a.v + off);
      } else {
        k[i] = v[i] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int i = 0; i < kLoadsPerTile; ++i) acc ^= fold(k[i]) ^ fold(v[i]);
  }
  for (int s = 16; s > 0; s /= 2) acc ^= __shfl_xor_sync(0xffffffffu, acc, s);
  if (threadIdx.x == 0) a.sink[blockIdx.x] = acc;
}

// The same loads over two flat buffers of the same sizes: CTA c reads its contiguous slice.
template <int kLoads>
__global__ void read_flat(const uint4* k, const uint4* v, std::int64_t vecs_per_cta, std::int64_t vecs,
                          std::uint32_t* sink) {
  const std::int64_t begin = blockIdx.x * vecs_per_cta, end = min(vecs, begin + vecs_per_cta);
  std::uint32_t acc = 0;
  for (std::int64_t base = begin + threadIdx.x; base < end; base += 8 * blockDim.x) {
    uint4 kk[8], vv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const std::int64_t j = base + i * blockDim.x;
      kk[i] = j < end ? load16<kLoads>(k + j) : make_uint4(0, 0, 0, 0);
      vv[i] = j < end ? load16<kLoads>(v + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) acc ^= fold(kk[i]) ^ fold(vv[i]);
  }
  for (int s = 16; s > 0; s /= 2) acc ^= __shfl_xor_sync(0xffffffffu, acc, s);
  if (threadIdx.x % 32 == 0) atomicXor(sink + blockIdx.x % 1024, acc);
}

// The reader kernels of a --loads value.
struct ReadKernels {
  void (*flat)(const uint4*, const uint4*, std::int64_t, std::int64_t, std::uint32_t*);
  void (*pages)(ProbeArgs);
};
template <int kLoads>
ReadKernels read_kernels(int row_vecs) {
  return {read_flat<kLoads>, row_vecs == 8 ? read_pages<kLoads, 8> : read_pages<kLoads, 16>};
}
ReadKernels kernels_for(const std::string& loads, int row_vecs) {
  if (loads == "plain") return read_kernels<kPlain>(row_vecs);
  if (loads == "evict_first") return read_kernels<kEvictFirst>(row_vecs);
  if (loads == "evict_normal") return read_kernels<kEvictNormal>(row_vecs);
  return read_kernels<kStreaming>(row_vecs);
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 64, seq_len = 2048, kv_heads = 8, iters = 50, tokens_per_cta = 512, threads = 256, row_bytes = 256;
  std::vector<int> page_sizes{16, 128, 1024};
  std::vector<std::string> layouts{"nhd", "hnd"}, orders{"shuffled", "sequential"};
  std::string shape = "d-b64", loads = "streaming";
  CLI::App app{"Paged read probe: a decode shape's K/V bytes read through its page table, nothing else"};
  app.add_option("--batch", batch, "Sequences")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--seq-len", seq_len, "Tokens per sequence")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--kv-heads", kv_heads, "KV heads (head_dim 128)")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--row-bytes", row_bytes, "Bytes of one head's row of a token: 256 (bf16) or 128 (fp8)")
      ->check(CLI::IsMember({128, 256}))
      ->capture_default_str();
  app.add_option("--page-sizes", page_sizes, "Page sizes")->check(CLI::Range(1, 1 << 16))->delimiter(',');
  app.add_option("--layouts", layouts, "nhd, hnd")->check(CLI::IsMember({"nhd", "hnd"}))->delimiter(',');
  app.add_option("--orders", orders, "shuffled, sequential")->check(CLI::IsMember({"shuffled", "sequential"}))->delimiter(',');
  app.add_option("--tokens-per-cta", tokens_per_cta, "Tokens of one row a CTA reads")
      ->check(CLI::Range(16, 1 << 24))->capture_default_str();
  app.add_option("--threads", threads, "Threads per CTA")->check(CLI::IsMember({64, 128, 256, 512}))->capture_default_str();
  app.add_option("--iters", iters, "Graph replays timed")->check(CLI::Range(3, 1 << 20))->capture_default_str();
  app.add_option("--loads", loads, "L2 treatment of the loads: streaming (ld.global.cs), plain, evict_first, evict_normal")
      ->check(CLI::IsMember({"streaming", "plain", "evict_first", "evict_normal"}))
      ->capture_default_str();
  app.add_option("--shape", shape, "Name written into the records")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    using namespace pagedattn::bench;
    const double ceiling = measure_cuda_copy_gbps(0);
    const std::string device = cuda_device_name(0);
    const auto [flat_kernel, pages_kernel] = kernels_for(loads, row_bytes / 16);
    const Stream stream;
    const std::int64_t row_vecs = row_bytes / 16, tokens = std::int64_t{batch} * seq_len;
    const double bytes = 2.0 * static_cast<double>(tokens * kv_heads * row_bytes);
    const int splits = (seq_len + tokens_per_cta - 1) / tokens_per_cta;
    Gpu sink(static_cast<std::size_t>(std::max<std::int64_t>(std::int64_t{batch} * kv_heads * splits, 1024)) * 4);
    const auto emit = [&](const std::string& access, const std::string& layout, int page, const std::string& order,
                          const std::vector<double>& us) {
      const double t = median(us), gbps = bytes / (t * 1e-6) / 1e9;
      const nlohmann::json r = {{"op", "paged_read_probe"}, {"device", device}, {"shape", shape},
                                {"access", access}, {"layout", layout}, {"page_size", page}, {"order", order},
                                {"batch", batch}, {"seq_len", seq_len}, {"num_kv_heads", kv_heads},
                                {"head_dim", 128}, {"row_bytes", row_bytes}, {"bytes", bytes}, {"time_us_median", t},
                                {"time_us_min", *std::min_element(us.begin(), us.end())},
                                {"achieved_gbps", gbps}, {"ceiling_gbps", ceiling}, {"ratio_to_ceiling", gbps / ceiling},
                                {"threads", threads}, {"tokens_per_cta", tokens_per_cta}, {"loads", loads}};
      std::printf("%s\n", r.dump().c_str());
      std::fflush(stdout);
    };
    {
      const std::int64_t vecs = tokens * kv_heads * row_vecs;
      Gpu k(static_cast<std::size_t>(vecs) * 16), v(static_cast<std::size_t>(vecs) * 16);
      fill_random(k.ptr, static_cast<std::size_t>(vecs) * 16, pagedattn::DType::kBF16, 1);
      fill_random(v.ptr, static_cast<std::size_t>(vecs) * 16, pagedattn::DType::kBF16, 2);
      const std::int64_t ctas = std::int64_t{batch} * kv_heads * splits;
      const std::int64_t per_cta = (vecs + ctas - 1) / ctas;
      const auto call = [&] {
        flat_kernel<<<static_cast<unsigned>(ctas), threads, 0, stream>>>(
            static_cast<const uint4*>(k.ptr), static_cast<const uint4*>(v.ptr), per_cta, vecs,
            static_cast<std::uint32_t*>(sink.ptr));
      };
      emit("flat", "contiguous", 0, "sequential", time_captured(stream, call, 5, iters));
    }
    for (const int page : page_sizes) {
      const std::int64_t pages_per_seq = (seq_len + page - 1) / page, pages = batch * pages_per_seq;
      const std::size_t pool_bytes = static_cast<std::size_t>(pages * page * kv_heads * row_bytes);
      Gpu k(pool_bytes), v(pool_bytes), table(static_cast<std::size_t>(pages) * 4);
      fill_random(k.ptr, pool_bytes, pagedattn::DType::kBF16, 1);
      fill_random(v.ptr, pool_bytes, pagedattn::DType::kBF16, 2);
      for (const std::string& order : orders) {
        std::vector<std::int32_t> ids = order == "shuffled" ? shuffled_page_ids(pages, kPageOrderSeed) : std::vector<std::int32_t>(pages);
        if (order == "sequential") std::iota(ids.begin(), ids.end(), 0);
        ok(cudaMemcpy(table.ptr, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "table");
        for (const std::string& layout : layouts) {
          const ProbeArgs a{static_cast<const uint4*>(k.ptr), static_cast<const uint4*>(v.ptr),
                            static_cast<const std::int32_t*>(table.ptr), pages_per_seq, seq_len, page, kv_heads,
                            tokens_per_cta, splits, static_cast<int>(row_vecs), layout == "hnd",
                            static_cast<std::uint32_t*>(sink.ptr)};
          const unsigned ctas = static_cast<unsigned>(batch * kv_heads * splits);
          const auto call = [&] { pages_kernel<<<ctas, threads, 0, stream>>>(a); };
          emit("paged", layout, page, order, time_captured(stream, call, 5, iters));
        }
      }
    }
    ok(cudaGetLastError(), "launch");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_paged_read_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
