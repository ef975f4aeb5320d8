#include "core/memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <stdexcept>

namespace remat {

const char* to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParameters:
      return "parameters";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kOptimizerState:
      return "optimizer_state";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kTemporaries:
      return "temporaries";
  }
  return "?";
}

int64_t MemorySnapshot::total() const {
  int64_t sum = 0;
  for (int64_t b : bytes) sum += b;
  return sum;
}

namespace {

// Buffers of 2 MiB or more are mapped on their own, on a 2 MiB boundary, and
// ask for transparent huge pages: one page fault per 2 MiB instead of 512
// (each costs microseconds, more in a virtual machine: they were half of a
// small run's start-up) and fewer TLB misses in the kernels. Fresh pages
// from the kernel, not the heap's (which may already be resident in 4 KiB
// pages). The kernel backs only whole aligned 2 MiB ranges with huge pages,
// so a buffer's resident bytes exceed its size by less than its cache
// colour (below); where huge pages are off, the advice does nothing.
constexpr size_t kHugePage = size_t{2} << 20;
// Under AddressSanitizer every buffer stays on the heap, whose bounds it
// checks (it does not watch the ends of a mapping).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMapLargeBuffers = false;
#else
constexpr bool kMapLargeBuffers = true;
#endif

bool mapped_on_its_own(size_t rounded) { return kMapLargeBuffers && rounded >= kHugePage; }

void* map_huge(size_t bytes) {
  // Cache colour: successive buffers start at different offsets into their
  // first huge page (a cycle of 64 lines of 64 bytes), so that kernels
  // streaming several buffers at once do not map them all to the same
  // cache sets, as buffers all aligned to 2 MiB would.
  static std::atomic<uint64_t> count{0};
  const size_t color = (count.fetch_add(1) * 17 % 64) * 64;
  bytes += color;
  const size_t span = bytes + kHugePage;
  void* mapped = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  // Keep [start, start + bytes) rounded to whole pages; return the rest.
  const uintptr_t base = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t end = start + (bytes + 4095) / 4096 * 4096;
  if (start > base) munmap(mapped, start - base);
  if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
  madvise(reinterpret_cast<void*>(start), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start + color);
}

void free_buffer(void* pointer, size_t rounded) {
  if (mapped_on_its_own(rounded)) {
    // The mapping starts at the huge page boundary below the buffer.
    const uintptr_t at = reinterpret_cast<uintptr_t>(pointer);
    const uintptr_t start = at / kHugePage * kHugePage;
    munmap(reinterpret_cast<void*>(start), at - start + rounded);
  } else {
    std::free(pointer);
  }
}

}  // namespace

HostStorage::~HostStorage() {
  for (auto& [size, pointer] : cache_) free_buffer(pointer, size);
}

void* HostStorage::allocate(int64_t bytes) {
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  if (auto it = cache_.find(rounded); it != cache_.end()) {
    void* pointer = it->second;
    cache_.erase(it);
    cached_bytes_ -= static_cast<int64_t>(rounded);
    return pointer;
  }
  if (mapped_on_its_own(rounded)) return map_huge(rounded);
  void* pointer = std::aligned_alloc(64, rounded);
  if (pointer == nullptr) throw std::bad_alloc();
  return pointer;
}

void HostStorage::release(void* pointer, int64_t bytes) {
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  cache_.emplace(rounded, pointer);
  cached_bytes_ += static_cast<int64_t>(rounded);
}

Allocator::Allocator(bool counting_only)
    : storage_(counting_only ? nullptr : std::make_unique<HostStorage>()) {}

Allocator::Allocator(std::unique_ptr<Storage> storage) : storage_(std::move(storage)) {
  if (storage_ == nullptr) throw std::logic_error("Allocator: null storage");
}

int64_t Allocator::reserved() const {
  return current_.total() + (storage_ ? storage_->cached_bytes() : 0);
}

int64_t Allocator::booked(int64_t bytes, MemoryCategory category) const {
  const double scale = scale_[static_cast<int>(category)];
  if (!counting_only() || scale == 1.0) return bytes;
  return static_cast<int64_t>(std::ceil(static_cast<double>(bytes) * scale));
}

void* Allocator::allocate(int64_t bytes, MemoryCategory category) {
  if (bytes < 0) throw std::logic_error("negative allocation");
  void* pointer = storage_ && bytes > 0 ? storage_->allocate(bytes) : nullptr;
  current_.bytes[static_cast<int>(category)] += booked(bytes, category);
  update_peak();
  if (listener_) listener_(current_);
  return pointer;
}

void Allocator::release(void* pointer, int64_t bytes, MemoryCategory category) {
  if (pointer != nullptr) storage_->release(pointer, bytes);
  current_.bytes[static_cast<int>(category)] -= booked(bytes, category);
  if (listener_) listener_(current_);
}

void Allocator::recategorize(int64_t bytes, MemoryCategory from, MemoryCategory to) {
  current_.bytes[static_cast<int>(from)] -= booked(bytes, from);
  current_.bytes[static_cast<int>(to)] += booked(bytes, to);
  update_peak();
  if (listener_) listener_(current_);
}

void Allocator::update_peak() {
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    category_peaks_.bytes[c] = std::max(category_peaks_.bytes[c], current_.bytes[c]);
  }
  if (current_.total() > peak_.total()) {
    peak_ = current_;
    peak_label_ = label_;
  }
}

void Allocator::reset_peak() {
  peak_ = current_;
  category_peaks_ = current_;
  peak_label_ = label_;
}

}  // namespace remat
