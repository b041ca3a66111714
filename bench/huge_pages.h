// Buffers for the CPU benchmarks' large streams (KV pools, the streaming-read ceiling's buffer),
// aligned to 2 MiB and advised for transparent huge pages where Linux leaves that to the
// program (THP mode "madvise"). With 4 KiB pages a shuffled 32 KiB KV page costs a TLB fill per
// 4 KiB; a serving engine can give its pool the same advice. The decode's pools and the ceiling's
// buffer get the same treatment, so the ratio between them stays fair.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace pagedattn::bench {

struct FreeBuffer {
  void operator()(void* p) const { std::free(p); }
};
template <class T>
using HugeBuffer = std::unique_ptr<T[], FreeBuffer>;

// `count` elements of T (uninitialised), 2 MiB-aligned, advised for huge pages (the kernel may
// still decline: then they are ordinary pages). Throws std::bad_alloc when out of memory.
void* allocate_huge_bytes(std::size_t bytes);
template <class T>
HugeBuffer<T> allocate_huge(std::size_t count) {
  return HugeBuffer<T>(static_cast<T*>(allocate_huge_bytes(count * sizeof(T))));
}

// KiB of this process's anonymous memory that the kernel backs with huge pages now (the
// AnonHugePages line of /proc/self/smaps_rollup), or -1 where that cannot be read.
long anon_huge_kib();

}  // namespace pagedattn::bench
