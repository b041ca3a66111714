// GPU copies of host tensors (device_mirror.h).
#include "device_mirror.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "pagedattn/error.h"

namespace pagedattn::testing {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(ErrorCode::kCuda, std::string(what) + ": " + cudaGetErrorString(e));
}

std::size_t span_bytes(const TensorView& t) {
  const auto span = t.byte_span();
  return static_cast<std::size_t>(span[1] - span[0]);
}

// Where the view's span starts, and how far its data pointer lies past that start.
const std::byte* span_start(const TensorView& t) { return reinterpret_cast<const std::byte*>(t.byte_span()[0]); }
std::size_t data_offset(const TensorView& t) {
  return t.numel() == 0 ? 0 : static_cast<std::size_t>(static_cast<const std::byte*>(t.data()) - span_start(t));
}

}  // namespace

DeviceBytes::DeviceBytes(std::size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) check(cudaMalloc(&ptr_, bytes_), "cudaMalloc");
}

DeviceBytes::~DeviceBytes() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceMirror::DeviceMirror(const TensorView& host) {
  if (!host.defined()) return;
  bytes_ = std::make_unique<DeviceBytes>(span_bytes(host));
  if (bytes_->bytes() == 0) {
    view_ = TensorView::rebind(host, nullptr, Device::cuda(0));
    return;
  }
  check(cudaMemcpy(bytes_->get(), span_start(host), bytes_->bytes(), cudaMemcpyHostToDevice), "upload");
  view_ = TensorView::rebind(host, static_cast<std::byte*>(bytes_->get()) + data_offset(host), Device::cuda(0));
}

void DeviceMirror::download(const TensorView& host) const {
  if (!bytes_ || bytes_->bytes() == 0) return;
  check(cudaMemcpy(const_cast<std::byte*>(span_start(host)), bytes_->get(), bytes_->bytes(), cudaMemcpyDeviceToHost),
        "download");
}

bool DeviceMirror::matches(const TensorView& host) const {
  if (!bytes_) return !host.defined();
  std::vector<std::byte> got(bytes_->bytes());
  if (!got.empty()) check(cudaMemcpy(got.data(), bytes_->get(), got.size(), cudaMemcpyDeviceToHost), "download");
  return std::equal(got.begin(), got.end(), span_start(host));
}

TableMirror::TableMirror(const PageTable& host) {
  auto add = [&](const TensorView& t) { return parts_.emplace_back(std::make_unique<DeviceMirror>(t))->view(); };
  if (const auto* bt = std::get_if<BlockTable>(&host)) {
    const TensorView block_table = add(bt->block_table);
    table_ = BlockTable{block_table, add(bt->seq_lens)};
  } else {
    const auto& csr = std::get<CsrPageTable>(host);
    const TensorView indptr = add(csr.indptr), indices = add(csr.indices);
    table_ = CsrPageTable{indptr, indices, add(csr.last_page_len)};
  }
}

void synchronize_device(const char* what) { check(cudaDeviceSynchronize(), what); }

}  // namespace pagedattn::testing
