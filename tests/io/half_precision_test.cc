// Narrowing fp32 to bf16 and fp16 (io/half_precision.h): round to nearest,
// ties to even, checked from the definition at every representable value,
// every midpoint between neighbours and one fp32 step either side of it;
// fp16 also against the compiler's own _Float16 conversion on random
// values, an independent implementation.
#include "io/half_precision.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace remat {
namespace {

// For every pair of neighbouring finite values lo < hi of the type (given
// by their bits, positive; negatives mirror them): lo and hi narrow to
// themselves, their midpoint to the one with an even last bit, and the fp32
// values just below and above the midpoint to lo and hi.
void expect_round_to_nearest_even(uint16_t largest_finite, float (*widen)(uint16_t),
                                  uint16_t (*narrow)(float), const char* type) {
  for (uint32_t bits = 0; bits < largest_finite; ++bits) {
    for (const uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const uint16_t lo_bits = static_cast<uint16_t>(bits | sign);
      const uint16_t hi_bits = static_cast<uint16_t>((bits + 1) | sign);
      const float lo = widen(lo_bits), hi = widen(hi_bits);
      ASSERT_EQ(narrow(lo), lo_bits) << type << " " << lo;
      ASSERT_EQ(narrow(hi), hi_bits) << type << " " << hi;
      // Exact in fp32: the midpoint needs one bit more than the type has.
      const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2) << type << " " << lo;
      const uint16_t even = (lo_bits & 1) == 0 ? lo_bits : hi_bits;
      ASSERT_EQ(narrow(mid), even) << type << " midpoint of " << lo << " and " << hi;
      const float toward_lo = std::nextafter(mid, lo), toward_hi = std::nextafter(mid, hi);
      ASSERT_EQ(narrow(toward_lo), lo_bits) << type << " just past the midpoint toward " << lo;
      ASSERT_EQ(narrow(toward_hi), hi_bits) << type << " just past the midpoint toward " << hi;
    }
  }
}

TEST(HalfPrecision, Bf16RoundsToNearestEven) {
  expect_round_to_nearest_even(0x7f7f, bf16_to_f32, f32_to_bf16, "bf16");
  // Past the largest bf16 (2^128 (1 - 2^-8)) by half a step or more: infinity.
  const float largest = bf16_to_f32(0x7f7f);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(f32_to_bf16(std::nextafter(largest, 0.0f)), 0x7f7f);
}

TEST(HalfPrecision, F16RoundsToNearestEven) {
  expect_round_to_nearest_even(0x7bff, f16_to_f32, f32_to_f16, "fp16");
  // 65520, midway from 65504 (odd last bit) to 2^16: infinity, and fits_f16
  // says so; below it, 65504.
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_FALSE(fits_f16(65520.0f));
  EXPECT_TRUE(fits_f16(std::nextafter(65520.0f, 0.0f)));
  EXPECT_FALSE(fits_f16(-1e30f));
  // Below the smallest subnormal 2^-24: half of it ties to +0 (even), more
  // than half rounds up to it, fp32 subnormals and the signs of zero stay.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

// GCC's _Float16 conversion (SSE2 software or F16C hardware, round to
// nearest even) on 4 million random finite fp32 bit patterns, spread over
// every exponent, and on values near fp16's range and subnormal boundaries.
TEST(HalfPrecision, F16AgreesWithTheCompilersConversion) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> near(-70000.0f, 70000.0f);
  std::uniform_real_distribution<float> tiny(-1e-4f, 1e-4f);
  int checked = 0;
  for (int i = 0; i < 4'000'000; ++i) {
    float x = 0;
    if (i % 3 == 0) {
      x = std::bit_cast<float>(any_bits(rng));
    } else if (i % 3 == 1) {
      x = near(rng);
    } else {
      x = tiny(rng);
    }
    if (!std::isfinite(x)) continue;
    const uint16_t expected = std::bit_cast<uint16_t>(static_cast<_Float16>(x));
    ASSERT_EQ(f32_to_f16(x), expected) << x;
    ASSERT_EQ(fits_f16(x), std::isfinite(static_cast<float>(static_cast<_Float16>(x)))) << x;
    ++checked;
  }
  EXPECT_GT(checked, 3'900'000);
}

}  // namespace
}  // namespace remat
