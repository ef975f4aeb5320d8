#include "core/normal.h"

#include <array>
#include <cmath>

namespace remat {

namespace {

// The ziggurat: 256 layers of equal area kArea under the density
// f(x) = exp(-x^2 / 2) (unnormalized), the base layer including the tail
// beyond kEdge. Both constants are those that make the layers stack exactly
// to the peak (Marsaglia and Tsang 2000, Doornik 2005).
constexpr int kLayers = 256;
constexpr double kEdge = 3.6541528853610088;
constexpr double kArea = 4.92867323399e-3;

double density(double x) { return std::exp(-0.5 * x * x); }

struct Tables {
  // Layer i is the rectangle |x| < width[i], between heights f(width[i]) and
  // f(width[i + 1]) (width[0]: the base, as wide as its area over f(kEdge);
  // width[kLayers] = 0, the peak). A point with |x| < width[i + 1] lies
  // under the curve whatever its height.
  std::array<double, kLayers + 1> width{};
  std::array<double, kLayers + 1> height{};

  Tables() {
    width[0] = kArea / density(kEdge);
    width[1] = kEdge;
    for (int i = 2; i < kLayers; ++i) {
      width[i] = std::sqrt(-2.0 * std::log(kArea / width[i - 1] + density(width[i - 1])));
    }
    width[kLayers] = 0;
    for (int i = 0; i <= kLayers; ++i) height[i] = density(width[i]);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// A uniform in [0, 1) from the top 53 bits of a word.
double unit(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

double StandardNormal::operator()() {
  const Tables& t = tables();
  for (;;) {
    // One word: the layer from its low 8 bits, the sign from bit 8, the
    // position from its top 53 bits.
    const uint64_t bits = rng_();
    const int layer = static_cast<int>(bits & (kLayers - 1));
    const bool negative = (bits >> 8) & 1;
    const double x = unit(bits) * t.width[layer];
    if (x < t.width[layer + 1]) return negative ? -x : x;
    if (layer == 0) return tail(negative);
    // The wedge between the layer's rectangle and the curve: a uniform
    // height in the layer, kept if it falls under f(x).
    const double y = t.height[layer] + unit(rng_()) * (t.height[layer + 1] - t.height[layer]);
    if (y < density(x)) return negative ? -x : x;
  }
}

// Marsaglia's tail method: x = kEdge + e1 / kEdge with e1, e2 exponential,
// kept when 2 e2 > (e1 / kEdge)^2, is exactly the normal beyond kEdge.
double StandardNormal::tail(bool negative) {
  for (;;) {
    // 1 - unit() is in (0, 1]: the logarithm stays finite.
    const double x = -std::log(1.0 - unit(rng_())) / kEdge;
    const double y = -std::log(1.0 - unit(rng_()));
    if (2.0 * y > x * x) return negative ? -(kEdge + x) : kEdge + x;
  }
}

}  // namespace remat
