#include "core/host_memory.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace remat {

int64_t physical_memory_bytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
}

int64_t process_peak_rss_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib < 0 ? -1 : static_cast<int64_t>(kib) * 1024;
}

int64_t process_minor_faults() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_minflt);
}

void keep_malloc_memory_mapped() {
  // Below 64 MiB from the heap (not mmap), and never trim below 1 GiB of
  // free heap. Fixing M_MMAP_THRESHOLD alone would also fix the trim
  // threshold at its 128 KiB default and trim on nearly every free.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

// Blocks handed out read 0x5a5a5a5a (1.5e16 as a float): loud if read.
void begin_malloc_warm_up() { mallopt(M_PERTURB, 0xa5); }

void end_malloc_warm_up() { mallopt(M_PERTURB, 0); }

void touch_malloc_headroom(int64_t bytes) {
  // Blocks well under M_MMAP_THRESHOLD, so they come from the arena; at most
  // 1 GiB of them taken, should the arena hold that much free space already.
  constexpr size_t kBlock = 256 << 10, kMaxBlocks = 4096;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  std::vector<void*> blocks;
  blocks.reserve(kMaxBlocks);
  std::vector<unsigned char> resident(kBlock / page + 1);
  int64_t fresh = 0;
  while (fresh < bytes && blocks.size() < kMaxBlocks) {
    void* block = std::malloc(kBlock);
    if (block == nullptr) break;
    blocks.push_back(block);
    const auto start = reinterpret_cast<uintptr_t>(block);
    const uintptr_t first = (start + page - 1) / page * page;
    const uintptr_t end = (start + kBlock) / page * page;
    if (end <= first || mincore(reinterpret_cast<void*>(first), end - first, resident.data()) != 0)
      continue;
    for (uintptr_t p = first, i = 0; p < end; p += page, ++i) {
      if ((resident[i] & 1) != 0) continue;
      *reinterpret_cast<volatile unsigned char*>(p) = 0;
      fresh += static_cast<int64_t>(page);
    }
  }
  for (void* block : blocks) std::free(block);
}

}  // namespace remat
