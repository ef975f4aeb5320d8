// Element types of tensors and program values. Every byte count in remat is
// numel * dtype_size(dtype): nothing else may assume 4 bytes per element.
#pragma once

#include <cstdint>

namespace remat {

enum class DType : uint8_t {
  kF32,   // activations, parameters, gradients, optimizer state
  kI32,   // token ids
  kBF16,  // mixed precision: activations and matmul operands (graph/program.h)
};

constexpr int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kI32:
      return 4;
    case DType::kBF16:
      return 2;
  }
  return 0;
}

// Bytes of `numel` elements of `dtype`; callers bound numel (models/limits.h).
constexpr int64_t bytes_of(int64_t numel, DType dtype) { return numel * dtype_size(dtype); }

const char* to_string(DType dtype);

}  // namespace remat
