// Standard normal draws for initializing weights: Marsaglia and Tsang's
// ziggurat over a 64-bit Mersenne Twister. An exact N(0, 1) sampler, written
// out so the numbers do not depend on the C++ library's distribution code,
// and fast: about 99% of draws take one random word, a table lookup and a
// multiply, where Box-Muller pays a logarithm and a sine or cosine per value
// (most of the time of initializing a model).
#pragma once

#include <cstdint>
#include <random>

namespace remat {

class StandardNormal {
 public:
  explicit StandardNormal(uint64_t seed) : rng_(seed) {}

  double operator()();

 private:
  double tail(bool negative);  // a draw beyond the base layer's edge

  std::mt19937_64 rng_;
};

}  // namespace remat
