// `pagedattn demo --device cuda`: the device twin of the KV pool (demo_device.h).
#include "demo_device.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "pagedattn/error.h"

namespace pagedattn::cli::demo {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::kCuda, std::string("demo: ") + what + ": " + cudaGetErrorString(e));
  }
}

// Bytes of a contiguous tensor (every demo tensor is).
std::size_t bytes_of(const TensorView& t) {
  return t.defined() ? static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()) : 0;
}

// Device memory of one buffer.
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) check(cudaMalloc(&ptr_, bytes_), "cudaMalloc");
  }
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_ = 0;
  void* ptr_ = nullptr;
};

// A contiguous host tensor copied to the device, and its device view.
struct Mirror {
  explicit Mirror(const TensorView& host) : buffer(bytes_of(host)) {
    if (!host.defined()) return;
    if (buffer.bytes() > 0) check(cudaMemcpy(buffer.get(), host.data(), buffer.bytes(), cudaMemcpyHostToDevice), "upload");
    view = TensorView::rebind(host, buffer.get(), Device::cuda(0));
  }
  DeviceBytes buffer;
  TensorView view;
};

// The table's tensors on the device, in the same format.
struct TableMirror {
  explicit TableMirror(const PageTable& host) {
    if (const auto* bt = std::get_if<BlockTable>(&host)) {
      parts.emplace_back(std::make_unique<Mirror>(bt->block_table));
      parts.emplace_back(std::make_unique<Mirror>(bt->seq_lens));
      table = BlockTable{parts[0]->view, parts[1]->view};
    } else {
      const auto& csr = std::get<CsrPageTable>(host);
      for (const TensorView* t : {&csr.indptr, &csr.indices, &csr.last_page_len}) parts.emplace_back(std::make_unique<Mirror>(*t));
      table = CsrPageTable{parts[0]->view, parts[1]->view, parts[2]->view};
    }
  }
  std::vector<std::unique_ptr<Mirror>> parts;
  PageTable table;
};

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
    const Mirror mapping(block_mapping);
    pagedattn::copy_blocks(ctx_, kv_, mapping.view, CopyBlocksOptions{&block_mapping});
    sync();
  }

  void append_kv(const TensorView& k, const TensorView& v, const TensorView& slots) override {
    const Mirror dk(k), dv(v), ds(slots);
    pagedattn::append_kv(ctx_, kv_, dk.view, dv.view, ds.view, AppendKVOptions{&slots});
    sync();
  }

  double attend(const TensorView& q, const TensorView& qo_indptr, const PageTable& table,
                const AttentionParams& params, const TensorView& out, const TensorView& lse) override {
    const Mirror dq(q), dindptr(qo_indptr);
    const TableMirror dtable(table);
    const DeviceBytes dout(bytes_of(out)), dlse(bytes_of(lse));
    const TensorView out_view = TensorView::rebind(out, dout.get(), Device::cuda(0));
    const TensorView lse_view = TensorView::rebind(lse, dlse.get(), Device::cuda(0));
    const auto t0 = std::chrono::steady_clock::now();
    if (qo_indptr.defined()) {
      prefill(ctx_, dq.view, dindptr.view, kv_, dtable.table, params, out_view, lse_view,
              PrefillOptions{&table, qo_indptr});
    } else {
      DecodeOptions options;
      options.host_table = &table;
      decode(ctx_, dq.view, kv_, dtable.table, params, out_view, lse_view, options);
    }
    sync();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    check(cudaMemcpy(out.data(), dout.get(), dout.bytes(), cudaMemcpyDeviceToHost), "output download");
    check(cudaMemcpy(lse.data(), dlse.get(), dlse.bytes(), cudaMemcpyDeviceToHost), "lse download");
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
