// What the operating system says about this machine's and this process's
// memory: the default budget when memory.limit is unset, and the resident
// size a run reports next to the allocator's books.
#pragma once

#include <cstdint>

namespace remat {

int64_t physical_memory_bytes();

// The process's peak resident set size so far (VmHWM in /proc/self/status),
// or -1 where it cannot be read. memory.limit bounds the allocator's books,
// not this (README "What memory.limit bounds").
int64_t process_peak_rss_bytes();

// Minor page faults the process has taken so far (getrusage): a step that
// touches memory no earlier step touched (a new buffer, new JIT code)
// faults; a steady-state step should not.
int64_t process_minor_faults();

}  // namespace remat
