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

// Encodes K's and V's boxes (16-bit elements, the same coordinate order for both; or fp8 bytes
// landing as rows of box_dims bytes, not with whole_rows: unswizzled, up to 256, or with
// `fp8_swizzled` 128-byte rows in the 128-byte swizzle, chunk c of row r at c ^ (r % 8)); false
// when the layout or alignment does not allow it (dims not contiguous, strides not multiples of
// 16 bytes, box_slots above 256 or the page size, K and V in different orders) or the driver
// refuses: the kernel then gathers with cp.async.
bool encode_kv_page_boxes(const detail::KVCacheAccess& kv, int box_dims, int box_slots, KVPageBoxes& out,
                          bool whole_rows = false, bool fp8_swizzled = false);

// 16-bit caches with 16-token pages and head_dim 128, as whole-page boxes stored by slot
// group: the 5-d tensor (dim % 64, slot % 8, dim / 64, G, H) whose box (64, 8, 2, 2, 1) is one
// page of one head, written as [slot / 8][dim / 64][slot % 8] rows of 128 bytes. Every 8-key
// group of a tile of such pages then lies 2048 bytes after the one before, so a K tile is one
// wgmma operand per k-step (the (dim, slot, dim / 64) page box of `whole_rows` needs two).
// The page's two slot groups and its pool index share G or H: where a page's slots are its
// outermost dimension (NHD), G runs over the pool's slot groups (two per page) and H over the
// heads; where its heads are (HND), G is the page's two groups and H runs over (page, head).
// Page p of head h is the box at (0, 0, 0, page_mul_g * p, page_mul_h * p + h).
struct KVPageGroupBoxes {
  CUtensorMap k, v;
  int page_mul_g = 2, page_mul_h = 0;
};

// Encodes K's and V's slot-group boxes; false when the cache is not 16-bit with 16-token pages
// and head_dim 128, its strides nest neither way, K and V nest differently, or the driver
// refuses.
bool encode_kv_page_groups(const detail::KVCacheAccess& kv, KVPageGroupBoxes& out);

}  // namespace pagedattn::cuda
