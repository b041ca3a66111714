// Page ids for the benchmarks' block tables: 0 .. pages - 1 in a fixed random order, so that a
// table never walks the pool in address order (which would flatter every reader).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace pagedattn::bench {

inline std::vector<std::int32_t> shuffled_page_ids(std::int64_t pages, std::uint64_t seed) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
  return ids;
}

}  // namespace pagedattn::bench
