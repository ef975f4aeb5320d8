#include "core/memory.h"

#include <algorithm>
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

HostStorage::~HostStorage() {
  for (auto& [size, pointer] : cache_) std::free(pointer);
}

void* HostStorage::allocate(int64_t bytes) {
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  if (auto it = cache_.find(rounded); it != cache_.end()) {
    void* pointer = it->second;
    cache_.erase(it);
    cached_bytes_ -= static_cast<int64_t>(rounded);
    return pointer;
  }
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
