// An owning, move-only buffer with a shape and a dtype, whose bytes are
// accounted by an Allocator under one MemoryCategory. A Tensor only owns its
// bytes: reading or writing them is a backend's business (runtime/backend.h),
// since they may live where the host cannot address them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/memory.h"

namespace remat {

using Shape = std::vector<int64_t>;
int64_t numel(const Shape& shape);
std::string to_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(Allocator& allocator, Shape shape, MemoryCategory category, DType dtype = DType::kF32);
  ~Tensor() { reset(); }
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  void reset();  // frees the buffer (and its accounting)
  // Moves this buffer's accounting to another category (no copy).
  void recategorize(MemoryCategory category);

  bool defined() const { return allocator_ != nullptr; }
  // The buffer (nullptr when empty or counting-only), as the kernels of the
  // backend that supplied the storage take it; f32 tensors only for data().
  float* data() { return static_cast<float*>(data_); }
  const float* data() const { return static_cast<const float*>(data_); }
  void* raw() { return data_; }
  const void* raw() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return bytes_of(numel_, dtype_); }
  MemoryCategory category() const { return category_; }

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
  MemoryCategory category_ = MemoryCategory::kTemporaries;
};

}  // namespace remat
