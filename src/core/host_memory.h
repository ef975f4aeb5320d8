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

// Makes glibc's malloc keep what the libraries free inside the process
// instead of returning it to the kernel: oneDNN allocates a few temporaries
// of 0.3-1.4 MiB inside every bf16 matmul it executes, which glibc served
// from fresh mmaps, or from heap it had trimmed, so steps long after
// warm-up faulted in ~900 KiB again now and then. With the mmap and trim
// thresholds fixed high, a freed block is reused by the next call and
// steady-state steps touch no new pages. The process's peak is unchanged
// (the blocks were in use at once before too). Call once, first thing.
void keep_malloc_memory_mapped();

// Training's warm-up, from the process's start to the end of its second
// step: meanwhile glibc fills every block malloc hands out and every block
// freed (M_PERTURB), so that every heap page the process has used by the end
// of it has been touched. Without it, steps long after warm-up still faulted
// in fresh heap pages now and then (150-223 at a time, in about a third of
// the runs under load): oneDNN's gemm:jit mallocs packing buffers of 0.3-1.4
// MiB on every call, and where glibc places them drifts from step to step;
// one that landed on heap pages that earlier blocks (set-up's included) had
// held but never written faulted them in. The fills cost a memset per block
// until the warm-up ends; nothing may read a block before writing it anyway
// (the fill is not zeros). main() begins it; the trainer ends it after its
// warm-up steps, every other command before it starts.
void begin_malloc_warm_up();
void end_malloc_warm_up();  // idempotent

// Writes `bytes` of the calling thread's malloc arena that no block has
// written yet: the top of its heap, where a block goes that fits in no free
// hole. The warm-up's fills touch every block used so far, but the heap's
// high-water mark still moved now and then: where oneDNN's per-call packing
// buffers land drifts with the order the threads free them in, and about one
// run in twenty under load grew the main arena 0.6-2 MiB past its warm-up
// extent at some step after warm-up, faulting 150-489 fresh pages there.
// Call on every thread that runs kernels, after end_malloc_warm_up (a block
// must not be filled as it is taken, or every page would look written): it
// takes 256 KiB blocks until `bytes` of them were never written (mincore:
// not resident), writes those pages, and frees every block again. The
// arena's free space is then that much deeper in written pages; RSS grows
// by about `bytes` per thread (a quarter more at most: malloc's own
// bookkeeping around the blocks).
void touch_malloc_headroom(int64_t bytes);

}  // namespace remat
