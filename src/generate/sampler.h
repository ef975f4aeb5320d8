// Picks the next token from a row of logits: greedy, or sampled with a
// temperature, top-k and top-p (nucleus) filtering, from a seeded generator.
//
// Deterministic: the same options, seed and logits give the same tokens on
// every machine (the generator is std::mt19937_64, whose sequence the C++
// standard fixes, turned into uniforms by hand rather than through a
// library distribution, whose algorithm is not fixed).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

namespace remat {

// Logits with a NaN or an infinity: the weights overflow (a checkpoint of
// finite but huge values loads, and gives them). Not a bug of remat's.
class NonFiniteLogits : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SamplingOptions {
  double temperature = 1.0;  // >= 0; 0: greedy (the argmax, no randomness)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // in (0, 1]: keep the fewest most likely tokens reaching p
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);

  // The next token of `logits` (one per vocabulary entry). Ties between
  // equal logits go to the lower id, so top_k = 1 picks what greedy picks.
  // NonFiniteLogits for a NaN or infinite logit.
  int32_t next(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 generator_;
  std::vector<int32_t> order_;  // candidate ids, most likely first
  std::vector<double> weights_;
};

}  // namespace remat
