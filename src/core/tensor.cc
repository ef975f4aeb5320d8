#include "core/tensor.h"

#include <stdexcept>

namespace remat {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    // Sizes are bounded before any program is built (models/limits.h); a
    // shape that still overflows is a bug, reported instead of wrapping.
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw std::overflow_error("numel: shape " + to_string(shape) + " overflows int64");
  }
  return n;
}

std::string to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kI32:
      return "i32";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

Tensor::Tensor(Allocator& allocator, Shape shape, MemoryCategory category, DType dtype)
    : allocator_(&allocator), shape_(std::move(shape)), dtype_(dtype), category_(category) {
  numel_ = remat::numel(shape_);
  data_ = allocator.allocate(bytes(), category);
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    shape_ = std::move(other.shape_);
    numel_ = std::exchange(other.numel_, 0);
    dtype_ = other.dtype_;
    category_ = other.category_;
  }
  return *this;
}

void Tensor::reset() {
  if (allocator_) allocator_->release(data_, bytes(), category_);
  allocator_ = nullptr;
  data_ = nullptr;
  numel_ = 0;
  shape_.clear();
}

void Tensor::recategorize(MemoryCategory category) {
  if (allocator_) allocator_->recategorize(bytes(), category_, category);
  category_ = category;
}

}  // namespace remat
