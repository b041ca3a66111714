// `pagedattn demo --device cuda`: the device twin of the KV pool (demo_device.h).
#include "demo_device.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "device_mirror.h"
#include "pagedattn/error.h"

namespace pagedattn::cli::demo {
namespace {

using testing::DeviceBytes;
using testing::DeviceMirror;
using testing::TableMirror;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::kCuda, std::string("demo: ") + what + ": " + cudaGetErrorString(e));
  }
}

class CudaPool final : public DevicePool {
 public:
  explicit CudaPool(const KVPool& host) : spec_(host.spec()), k_(host.tensor_bytes()), v_(host.tensor_bytes()) {
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    check(cudaMemcpy(k_.get(), host.k_bytes(), k_.bytes(), cudaMemcpyHostToDevice), "pool upload");
    check(cudaMemcpy(v_.get(), host.v_bytes(), v_.bytes(), cudaMemcpyHostToDevice), "pool upload");
    kv_ = spec_.make_views(k_.get(), v_.get(), Device::cuda(0));
    ctx_ = Context{Device::cuda(0), stream_};
  }
  ~CudaPool() override { cudaStreamDestroy(stream_); }

  void copy_blocks(const TensorView& block_mapping) override {
    const DeviceMirror mapping(block_mapping);
    pagedattn::copy_blocks(ctx_, kv_, mapping.view(), CopyBlocksOptions{&block_mapping});
    sync();
  }

  void append_kv(const TensorView& k, const TensorView& v, const TensorView& slots) override {
    const DeviceMirror dk(k), dv(v), ds(slots);
    pagedattn::append_kv(ctx_, kv_, dk.view(), dv.view(), ds.view(), AppendKVOptions{&slots});
    sync();
  }

  double attend(const TensorView& q, const TensorView& qo_indptr, const PageTable& table,
                const AttentionParams& params, const TensorView& out, const TensorView& lse) override {
    const DeviceMirror dq(q), dindptr(qo_indptr), dout(out), dlse(lse);
    const TableMirror dtable(table);
    const auto t0 = std::chrono::steady_clock::now();
    if (qo_indptr.defined()) {
      prefill(ctx_, dq.view(), dindptr.view(), kv_, dtable.table(), params, dout.view(), dlse.view(),
              PrefillOptions{&table, qo_indptr});
    } else {
      DecodeOptions options;
      options.host_table = &table;
      decode(ctx_, dq.view(), kv_, dtable.table(), params, dout.view(), dlse.view(), options);
    }
    sync();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    dout.download(out);
    dlse.download(lse);
    return seconds;
  }

  std::int64_t differing_bytes(const KVPool& host) const override {
    std::vector<std::byte> bytes(k_.bytes());
    std::int64_t differ = 0;
    for (const auto& [dev, ref] : {std::pair{&k_, host.k_bytes()}, std::pair{&v_, host.v_bytes()}}) {
      check(cudaMemcpy(bytes.data(), dev->get(), bytes.size(), cudaMemcpyDeviceToHost), "pool download");
      for (std::size_t i = 0; i < bytes.size(); ++i) differ += bytes[i] != ref[i];
    }
    return differ;
  }

 private:
  void sync() { check(cudaStreamSynchronize(stream_), "demo step on the GPU"); }

  KVCacheSpec spec_;
  DeviceBytes k_, v_;
  PagedKV kv_;
  cudaStream_t stream_ = nullptr;
  Context ctx_;
};

}  // namespace

std::unique_ptr<DevicePool> make_device_pool(const KVPool& host) { return std::make_unique<CudaPool>(host); }

}  // namespace pagedattn::cli::demo
