#include "core/tensor.h"

#include <cstring>
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

Tensor::Tensor(Allocator& allocator, Shape shape, MemoryCategory category)
    : allocator_(&allocator), shape_(std::move(shape)), category_(category) {
  numel_ = remat::numel(shape_);
  data_ = static_cast<float*>(allocator.allocate(numel_ * 4, category));
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    shape_ = std::move(other.shape_);
    numel_ = std::exchange(other.numel_, 0);
    category_ = other.category_;
  }
  return *this;
}

void Tensor::reset() {
  if (allocator_) allocator_->release(data_, numel_ * 4, category_);
  allocator_ = nullptr;
  data_ = nullptr;
  numel_ = 0;
  shape_.clear();
}

void Tensor::zero() {
  if (data_) std::memset(data_, 0, static_cast<size_t>(numel_) * 4);
}

void Tensor::recategorize(MemoryCategory category) {
  if (allocator_) allocator_->recategorize(bytes(), category_, category);
  category_ = category;
}

}  // namespace remat
