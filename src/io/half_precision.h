// bf16 and fp16 as safetensors stores them (little-endian uint16 bit
// patterns): widening to fp32, which is exact, and narrowing from it, which
// rounds to nearest with ties to even, as PyTorch's `tensor.to(torch.bfloat16)`
// and `.to(torch.float16)` do. The checkpoint reader widens (weights exported
// in half precision load as fp32); the final weights-only save narrows
// (checkpoint.export_dtype).
#pragma once

#include <cstdint>

namespace remat {

float bf16_to_f32(uint16_t bits);
float f16_to_f32(uint16_t bits);

// Finite x only (callers check: saves refuse NaN and inf). bf16 has fp32's
// range, so a finite x narrows to a finite bf16 unless it rounds past the
// largest one (|x| >= 2^128 (1 - 2^-9)), which gives infinity.
uint16_t f32_to_bf16(float x);
// Finite x: |x| >= 65520 (the midpoint above fp16's largest, 65504) gives
// infinity; values below fp16's smallest subnormal round to (signed) zero.
uint16_t f32_to_f16(float x);

// Whether f32_to_f16(x) is finite: |x| < 65520.
bool fits_f16(float x);

}  // namespace remat
