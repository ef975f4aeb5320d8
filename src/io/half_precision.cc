#include "io/half_precision.h"

#include <bit>
#include <cmath>

namespace remat {

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// The sign moves up, the exponent is rebiased (15 -> 127), subnormals are
// normalised, infinities and NaNs keep their class and payload.
float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  uint32_t shifts = 0;  // a subnormal m * 2^-24: shift m up to 1.f x 2^10
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shifts;
  }
  return std::bit_cast<float>(sign | ((113 - shifts) << 23) | ((mantissa & 0x3ffu) << 13));
}

// Adding 0x7fff plus the kept part's lowest bit to the 16 bits dropped
// carries into the kept part exactly when they are above half, or at half
// with an odd kept part: round to nearest, ties to even. A carry out of the
// mantissa steps the exponent, up to infinity past the largest bf16.
uint16_t f32_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The value is rounded where fp16 keeps its last bit: a normal fp16 keeps
// 11 significant bits; below 2^-14 the spacing stays 2^-24 (subnormals).
// x + 1.5 * 2^(e + 9) style tricks depend on the FPU's rounding mode; this
// works on the bits, with the same carry rule as f32_to_bf16.
uint16_t f32_to_f16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: rounds past 65504
  const int32_t exponent = static_cast<int32_t>(magnitude >> 23) - 127;
  if (exponent >= -14) {  // a normal fp16: drop 13 of the 23 mantissa bits
    const uint32_t rebased = magnitude - (112u << 23);  // exponent bias 127 -> 15
    return sign | static_cast<uint16_t>((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13);
  }
  if (exponent < -25) return sign;  // below half the smallest subnormal (2^-25): zero
  // A subnormal fp16 m * 2^-24: the full significand (implicit bit set)
  // shifted so that its units are 2^-24, rounded the same way. A carry to
  // 0x400 is the smallest normal, whose bits are exactly that.
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = static_cast<uint32_t>(-exponent - 1);  // 14 .. 24
  const uint32_t half = 1u << (shift - 1);
  const uint32_t kept = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1);
  const uint32_t up = dropped > half || (dropped == half && (kept & 1u)) ? 1u : 0u;
  return sign | static_cast<uint16_t>(kept + up);
}

bool fits_f16(float x) { return std::fabs(x) < 65520.0f; }

}  // namespace remat
