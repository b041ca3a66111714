#include "huge_pages.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace pagedattn::bench {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
}  // namespace

void* allocate_huge_bytes(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: refused, the pages stay 4 KiB
#endif
  return p;
}

long anon_huge_kib() {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  long kib = -1;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "AnonHugePages:", 14) == 0) kib = std::strtol(line + 14, nullptr, 10);
  }
  std::fclose(f);
  return kib;
}

}  // namespace pagedattn::bench
