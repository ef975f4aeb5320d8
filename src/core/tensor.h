// An owning, move-only fp32 (or int32) buffer with a shape, whose bytes are
// accounted by an Allocator under one MemoryCategory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"

namespace remat {

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& shape);
std::string to_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(Allocator& allocator, Shape shape, MemoryCategory category);
  ~Tensor() { reset(); }
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  void reset();  // frees the buffer (and its accounting)
  void zero();
  // Moves this buffer's accounting to another category (no copy).
  void recategorize(MemoryCategory category);

  bool defined() const { return allocator_ != nullptr; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * 4; }
  MemoryCategory category() const { return category_; }

 private:
  Allocator* allocator_ = nullptr;
  float* data_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
  MemoryCategory category_ = MemoryCategory::kTemporaries;
};

}  // namespace remat
