// The accounting allocator: every byte the engine holds goes through it,
// tagged with what it is for, so the peak and its breakdown are exact.
//
// Invariants:
//  - current(c) is the sum of the sizes of live allocations of category c;
//  - peak() is the largest current total seen since the last reset_peak();
//  - at_peak() is the per-category breakdown at the moment that peak was set.
// Sizes are the bytes requested, not the rounded-up bytes malloc hands out, so
// a planner that replays the same requests predicts the same numbers.
//
// The books are separate from where the bytes live: a Storage (supplied by
// a backend: host memory, a device heap) hands out raw buffers, the
// Allocator books every request above it, so any storage gets the same
// accounting. The books count live bytes only; reserved() adds what the
// storage holds beyond them (its cache of freed buffers).
//
// In counting-only mode there is no storage: allocate() returns nullptr and
// only the books are kept. The planner uses that mode to replay a schedule.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

namespace remat {

enum class MemoryCategory : int {
  kParameters = 0,
  kGradients,
  kOptimizerState,
  kActivations,  // values kept from the forward pass for the backward pass
  kTemporaries,  // everything short-lived: transient values, recomputed
                 // values, activation gradients, kernel workspaces
};
constexpr int kNumMemoryCategories = 5;
const char* to_string(MemoryCategory category);

struct MemorySnapshot {
  std::array<int64_t, kNumMemoryCategories> bytes{};
  int64_t total() const;
  int64_t operator[](MemoryCategory c) const { return bytes[static_cast<int>(c)]; }
};

// Raw storage: where bytes live. Not thread-safe (the executor allocates
// from one thread).
class Storage {
 public:
  virtual ~Storage() = default;
  // A 64-byte aligned buffer of at least `bytes` > 0 bytes; throws
  // std::bad_alloc rather than returning nullptr.
  virtual void* allocate(int64_t bytes) = 0;
  // `bytes` is what allocate() was asked for.
  virtual void release(void* pointer, int64_t bytes) = 0;
  // Bytes held beyond the live buffers (e.g. a cache of freed ones).
  virtual int64_t cached_bytes() const { return 0; }
};

// Host memory. Freed buffers are cached by size and handed out again (a
// training step repeats the same requests, so after the first step nothing
// reaches malloc and no page is faulted in again).
class HostStorage final : public Storage {
 public:
  HostStorage() = default;
  ~HostStorage() override;
  HostStorage(const HostStorage&) = delete;
  HostStorage& operator=(const HostStorage&) = delete;

  void* allocate(int64_t bytes) override;
  void release(void* pointer, int64_t bytes) override;
  int64_t cached_bytes() const override { return cached_bytes_; }

 private:
  std::unordered_multimap<size_t, void*> cache_;  // rounded size -> free buffer
  int64_t cached_bytes_ = 0;
};

class Allocator {
 public:
  // Books over host memory, or (counting_only) over no memory at all.
  explicit Allocator(bool counting_only = false);
  // Books over the given storage (a backend's).
  explicit Allocator(std::unique_ptr<Storage> storage);
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns the storage's memory (nullptr for 0 bytes or counting-only).
  void* allocate(int64_t bytes, MemoryCategory category);
  void release(void* pointer, int64_t bytes, MemoryCategory category);
  // Moves accounted bytes from one category to another without touching the
  // memory (e.g. a kept activation whose buffer becomes a gradient in place).
  void recategorize(int64_t bytes, MemoryCategory from, MemoryCategory to);

  bool counting_only() const { return storage_ == nullptr; }
  // Counting-only mode: book each request of category c as
  // ceil(bytes * scale[c]) (e.g. 0.5 for bf16 activations, 1/N for state
  // sharded over N ranks), so one replay can price other dtypes and layouts.
  void set_scale(const std::array<double, kNumMemoryCategories>& scale) { scale_ = scale; }
  const MemorySnapshot& current() const { return current_; }
  int64_t peak() const { return peak_.total(); }
  const MemorySnapshot& at_peak() const { return peak_; }
  // The high-water mark of each category on its own (since reset_peak()).
  const MemorySnapshot& category_peaks() const { return category_peaks_; }
  // A label for the moment of the peak, set by whoever drives the allocator
  // (the executor names the op it is running). Held by value, so no caller
  // can leave a dangling label behind (e.g. when a step throws).
  const std::string& peak_label() const { return peak_label_; }
  void set_label(std::string label) { label_ = std::move(label); }
  void reset_peak();
  // Called with current() after every change of the books (allocate,
  // release, recategorize) while set; an empty function removes it. The
  // measured memory timeline of `remat train` follows a step through it.
  void set_listener(std::function<void(const MemorySnapshot&)> listener) {
    listener_ = std::move(listener);
  }
  // Live bytes plus what the storage holds beyond them (its cache).
  int64_t reserved() const;

 private:
  void update_peak();
  int64_t booked(int64_t bytes, MemoryCategory category) const;

  std::unique_ptr<Storage> storage_;  // null: counting only
  MemorySnapshot current_;
  MemorySnapshot peak_;
  MemorySnapshot category_peaks_;
  std::array<double, kNumMemoryCategories> scale_{1, 1, 1, 1, 1};
  std::string label_;
  std::string peak_label_;
  std::function<void(const MemorySnapshot&)> listener_;
};

}  // namespace remat
