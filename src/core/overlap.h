// Internal: whether memory that an op reads and memory that it writes meet. Where an output may
// share memory with an input only element for element (or not at all), a partial overlap would
// make the result depend on the order of the writes, so the ops reject it before writing.
// Addresses compare across host and device memory alike: CUDA's unified address space gives
// every allocation addresses of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "pagedattn/tensor.h"

namespace pagedattn::detail {

// The bytes [begin, end); an empty range meets nothing.
struct ByteRange {
  std::uintptr_t begin = 0, end = 0;
};

// Some pair (i, j) with a[i] and b[j] sharing a byte, or none. Ranges within `a` (or within `b`)
// may overlap each other. O(n log n) in the number of ranges.
std::optional<std::pair<std::size_t, std::size_t>> find_overlap(std::span<const ByteRange> a,
                                                                std::span<const ByteRange> b);

// a and b are the same elements in the same order: same data, dtype, device, shape and strides.
bool same_view(const TensorView& a, const TensorView& b);

// Some byte lies in an element of a and in an element of b. Exact: views that interleave
// without sharing an element (two slots of one larger tensor) do not overlap. O(1) when their
// byte spans are apart, when they start at one address, and when they interleave along their
// first dimension (a stacked cache's K and V, q and out as halves of one buffer's rows);
// otherwise it walks their rows (contiguous runs of the last dimension).
bool views_overlap(const TensorView& a, const TensorView& b);

// No two elements of t share memory. A sufficient test, exact for the nested strides of slices
// and permutations of a dense tensor: ordered by stride, each dimension steps past everything
// the smaller ones span.
bool elements_distinct(const TensorView& t);

}  // namespace pagedattn::detail
