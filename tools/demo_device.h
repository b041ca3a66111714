// The demo on a GPU (`pagedattn demo --device cuda`): a device twin of the host KV pool. Every
// cache write of the serving loop runs on both pools (the host one through the CPU ops, which the
// reference and the read-back checks read), every attention call runs on the twin, and after
// each verified step the twin must equal the host pool byte for byte: the CUDA cache writes store
// the CPU's bytes, fp8 rounding included.
#pragma once

#include <cstdint>
#include <memory>

#include "demo.h"
#include "pagedattn/ops.h"

namespace pagedattn::cli::demo {

class DevicePool {
 public:
  virtual ~DevicePool() = default;
  // block_mapping: host i64 [n, 2] (source page, destination page).
  virtual void copy_blocks(const TensorView& block_mapping) = 0;
  // k, v: host [n, num_kv_heads, head_dim]; slots: host i64 [n].
  virtual void append_kv(const TensorView& k, const TensorView& v, const TensorView& slots) = 0;
  // decode (qo_indptr undefined) or prefill on the twin, from host q, qo_indptr and page table
  // into host out and lse; returns the seconds from the call to the results being ready on the
  // device (host copies of the inputs and outputs excluded).
  virtual double attend(const TensorView& q, const TensorView& qo_indptr, const PageTable& table,
                        const AttentionParams& params, const TensorView& out, const TensorView& lse) = 0;
  // Bytes of the twin (K and V) that differ from the host pool's.
  virtual std::int64_t differing_bytes(const KVPool& host) const = 0;
};

// A twin of `host` (NaN-poisoned as it is) on the first GPU. Throws kUnsupported in a build
// without CUDA.
std::unique_ptr<DevicePool> make_device_pool(const KVPool& host);

}  // namespace pagedattn::cli::demo
