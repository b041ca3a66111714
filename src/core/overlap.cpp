#include "core/overlap.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <vector>

namespace pagedattn::detail {

namespace {

struct Tagged {
  ByteRange r;
  std::size_t index = 0;
  bool in_b = false;
};

// Sweeps the ranges of both lists in order of their first byte, keeping the farthest-reaching
// range seen so far of each list: a range meets some earlier-starting range of the other list
// iff it starts before that one ends. Returns (index in a, index in b).
std::optional<std::pair<std::size_t, std::size_t>> sweep(std::vector<Tagged> all) {
  std::sort(all.begin(), all.end(), [](const Tagged& x, const Tagged& y) {
    return x.r.begin != y.r.begin ? x.r.begin < y.r.begin : x.in_b != y.in_b ? !x.in_b : x.index < y.index;
  });
  std::array<const Tagged*, 2> farthest{nullptr, nullptr};  // [0]: a's, [1]: b's
  for (const Tagged& t : all) {
    const Tagged* other = farthest[t.in_b ? 0 : 1];
    if (other != nullptr && other->r.end > t.r.begin) {
      return t.in_b ? std::pair{other->index, t.index} : std::pair{t.index, other->index};
    }
    const Tagged*& mine = farthest[t.in_b ? 1 : 0];
    if (mine == nullptr || t.r.end > mine->r.end) mine = &t;
  }
  return std::nullopt;
}

void add(std::vector<Tagged>& all, std::span<const ByteRange> ranges, bool in_b) {
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i].end) all.push_back({ranges[i], i, in_b});
  }
}

// The byte ranges of t's elements: runs along the last dimension when it is contiguous, else
// one range per element.
std::vector<ByteRange> element_runs(const TensorView& t) {
  const int rank = t.rank();
  const auto esize = static_cast<std::int64_t>(dtype_size(t.dtype()));
  const bool runs = rank > 0 && t.stride(rank - 1) == 1;
  const int outer = runs ? rank - 1 : rank;
  const std::int64_t run_bytes = (runs ? t.size(rank - 1) : 1) * esize;
  std::vector<ByteRange> out;
  if (t.numel() == 0) return out;
  std::int64_t count = 1;
  for (int d = 0; d < outer; ++d) count *= t.size(d);
  out.reserve(static_cast<std::size_t>(count));
  std::array<std::int64_t, TensorView::kMaxRank> index{};
  const auto base = reinterpret_cast<std::uintptr_t>(t.data());
  for (std::int64_t n = 0; n < count; ++n) {
    std::int64_t offset = 0;
    for (int d = 0; d < outer; ++d) offset += index[static_cast<std::size_t>(d)] * t.stride(d);
    const auto begin = static_cast<std::uintptr_t>(static_cast<std::int64_t>(base) + offset * esize);
    out.push_back({begin, begin + static_cast<std::uintptr_t>(run_bytes)});
    for (int d = outer - 1; d >= 0 && ++index[static_cast<std::size_t>(d)] == t.size(d); --d) {
      index[static_cast<std::size_t>(d)] = 0;
    }
  }
  return out;
}

// Bytes from a view's first element to the end of its last along dimensions first_dim..,
// or none when one of their strides is negative.
std::optional<__int128> forward_extent_bytes(const TensorView& t, int first_dim) {
  __int128 reach = 0;
  for (int d = first_dim; d < t.rank(); ++d) {
    if (t.stride(d) < 0) return std::nullopt;
    reach += static_cast<__int128>(t.size(d) - 1) * t.stride(d);
  }
  return (reach + 1) * static_cast<__int128>(dtype_size(t.dtype()));
}

// Views that interleave along their first dimension (a stacked cache's K and V page by page,
// q and out as halves of one buffer's rows) step by one byte stride: true when b's block falls
// in the gap a's leaves, so no element is shared; none otherwise (the exact walk decides).
std::optional<bool> interleaved_apart(const TensorView& a, const TensorView& b) {
  if (a.rank() == 0 || b.rank() == 0 || a.size(0) < 1 || b.size(0) < 1) return std::nullopt;
  const __int128 step = static_cast<__int128>(a.stride(0)) * static_cast<__int128>(dtype_size(a.dtype()));
  if (step <= 0 || step != static_cast<__int128>(b.stride(0)) * static_cast<__int128>(dtype_size(b.dtype()))) {
    return std::nullopt;
  }
  const std::optional<__int128> a_block = forward_extent_bytes(a, 1), b_block = forward_extent_bytes(b, 1);
  if (!a_block || !b_block || *a_block > step || *b_block > step) return std::nullopt;
  const __int128 offset = static_cast<__int128>(reinterpret_cast<std::intptr_t>(b.data())) -
                          static_cast<__int128>(reinterpret_cast<std::intptr_t>(a.data()));
  const __int128 phase = ((offset % step) + step) % step;
  if (phase >= *a_block && phase + *b_block <= step) return true;
  return std::nullopt;
}

}  // namespace

std::optional<std::pair<std::size_t, std::size_t>> find_overlap(std::span<const ByteRange> a,
                                                                std::span<const ByteRange> b) {
  std::vector<Tagged> all;
  all.reserve(a.size() + b.size());
  add(all, a, false);
  add(all, b, true);
  return sweep(std::move(all));
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data() != b.data() || a.dtype() != b.dtype() || a.device() != b.device() || a.rank() != b.rank()) return false;
  for (int d = 0; d < a.rank(); ++d) {
    if (a.size(d) != b.size(d) || (a.size(d) > 1 && a.stride(d) != b.stride(d))) return false;
  }
  return true;
}

bool views_overlap(const TensorView& a, const TensorView& b) {
  const auto sa = a.byte_span(), sb = b.byte_span();
  if (sa[0] >= sb[1] || sb[0] >= sa[1]) return false;  // apart, or one of them empty
  if (a.data() == b.data()) return true;                // both hold the byte at data()
  // The ops check this on every call, on caches of millions of rows: the common ways to share
  // memory without sharing an element are decided without walking the rows.
  if (const std::optional<bool> apart = interleaved_apart(a, b)) return !*apart;
  const std::vector<ByteRange> ra = element_runs(a), rb = element_runs(b);
  return find_overlap(ra, rb).has_value();
}

bool elements_distinct(const TensorView& t) {
  if (t.numel() == 0) return true;
  // (|stride|, size) per dimension; those of size 1 (and the unused) sort last and add nothing.
  std::array<std::pair<std::int64_t, std::int64_t>, TensorView::kMaxRank> dims;
  dims.fill({std::numeric_limits<std::int64_t>::max(), 1});
  for (int d = 0; d < t.rank(); ++d) {
    if (t.size(d) > 1) dims[static_cast<std::size_t>(d)] = {std::abs(t.stride(d)), t.size(d)};
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t span = 1;  // elements covered by the dimensions so far
  for (const auto& [stride, size] : dims) {
    if (size == 1) break;
    if (stride < span) return false;
    span += (size - 1) * stride;
  }
  return true;
}

}  // namespace pagedattn::detail
