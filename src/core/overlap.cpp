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

// Sweeps ranges in order of their first byte, keeping the farthest-reaching range seen so far
// of each list: a range meets some earlier-starting range iff it starts before that one ends.
std::optional<std::pair<std::size_t, std::size_t>> sweep(std::vector<Tagged> all, bool across) {
  std::sort(all.begin(), all.end(), [](const Tagged& x, const Tagged& y) {
    return x.r.begin != y.r.begin ? x.r.begin < y.r.begin : x.in_b != y.in_b ? !x.in_b : x.index < y.index;
  });
  std::array<const Tagged*, 2> farthest{nullptr, nullptr};  // per list (one list when !across)
  for (const Tagged& t : all) {
    const Tagged* other = farthest[across && !t.in_b ? 1 : 0];
    if (other != nullptr && other->r.end > t.r.begin) {
      return t.in_b || !across ? std::pair{other->index, t.index} : std::pair{t.index, other->index};
    }
    const Tagged*& mine = farthest[across && t.in_b ? 1 : 0];
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

}  // namespace

std::optional<std::pair<std::size_t, std::size_t>> find_overlap(std::span<const ByteRange> a,
                                                                std::span<const ByteRange> b) {
  std::vector<Tagged> all;
  all.reserve(a.size() + b.size());
  add(all, a, false);
  add(all, b, true);
  return sweep(std::move(all), true);
}

std::optional<std::pair<std::size_t, std::size_t>> find_overlap(std::span<const ByteRange> a) {
  std::vector<Tagged> all;
  all.reserve(a.size());
  add(all, a, false);
  return sweep(std::move(all), false);
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
