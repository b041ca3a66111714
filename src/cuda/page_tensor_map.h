// Internal: a cache's K or V pages described for the Hopper tensor memory accelerator (TMA),
// so that a kernel copies a page of one head with one instruction instead of a thread per
// 16 bytes.
#pragma once

#include <cuda.h>

#include "core/problem.h"

namespace pagedattn::cuda {

// K and V of a cache, each as the 4-d tensor (dim, head, slot, page) -- or (dim, slot, head,
// page) when heads are further apart than slots, as in HND (kept from when strides were thought
// to have to grow outwards: the driver takes any order) -- whose boxes are `box_dims` dims x
// `box_slots` slots of one page and one head, written to shared memory as rows of 128 bytes in
// the 128-byte swizzle that wgmma and ldmatrix read. With `whole_rows`, the 5-d tensor (dim %
// box_dims, slot, dim / box_dims, head, page) instead, whose box is `box_slots` whole rows of
// one head, written as head_dim / box_dims blocks of box_dims dims one after the other (one box
// where the 4-d map takes one per block).
struct KVPageBoxes {
  CUtensorMap k, v;
  bool head_inner = true;  // coordinate order: (dim, head, slot, page) when true
};

// Encodes K's and V's boxes (16-bit elements, the same coordinate order for both); false when
// the layout or alignment does not allow it (dims not contiguous, strides not multiples of 16
// bytes, box_slots above 256 or the page size, K and V in different orders) or the driver
// refuses: the kernel then gathers with cp.async.
bool encode_kv_page_boxes(const detail::KVCacheAccess& kv, int box_dims, int box_slots, KVPageBoxes& out,
                          bool whole_rows = false);

}  // namespace pagedattn::cuda
