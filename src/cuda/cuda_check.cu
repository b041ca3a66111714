#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/scoped_device.h"
#include "cuda/sm_count.h"

namespace pagedattn::cuda {

void check_launch(const char* kernel, cudaStream_t stream, std::source_location where) {
  check_cuda(cudaGetLastError(), kernel, where);
  static const bool sync_check = std::getenv("PAGEDATTN_CUDA_SYNC_CHECK") != nullptr;
  if (sync_check) check_cuda(cudaStreamSynchronize(stream), kernel, where);
}

cudaError_t allow_dynamic_shared_memory(const void* kernel, int bytes) {
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> done;  // (kernel, device)
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.contains({kernel, device})) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.insert({kernel, device});
  return err;
}

int cached_device_attribute(cudaDeviceAttr attribute, int device) {
  static std::mutex mutex;
  static std::map<std::pair<cudaDeviceAttr, int>, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find({attribute, device}); it != known.end()) return it->second;
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, attribute, device), "device attribute");
  known.emplace(std::pair{attribute, device}, value);
  return value;
}

ScopedDevice::ScopedDevice(int device) : device_(device) {
  check_cuda(cudaGetDevice(&previous_), "current device");
  if (previous_ != device_) check_cuda(cudaSetDevice(device_), "making the op's device current");
}

ScopedDevice::~ScopedDevice() {
  if (previous_ != device_) static_cast<void>(cudaSetDevice(previous_));
}

}  // namespace pagedattn::cuda
