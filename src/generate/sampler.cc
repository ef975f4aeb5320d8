#include "generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace remat {

namespace {

// The first of the largest logits; NonFiniteLogits for a non-finite one.
int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      throw NonFiniteLogits("logit " + std::to_string(i) + " is not finite (" +
                            std::to_string(logits[i]) + ")");
    }
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace

Sampler::Sampler(const SamplingOptions& options) : options_(options), generator_(options.seed) {}

int32_t Sampler::next(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("sampler: no logits");
  const int32_t best = argmax(logits);
  if (options_.temperature == 0) return best;
  const auto vocab = static_cast<int64_t>(logits.size());
  order_.resize(logits.size());
  std::iota(order_.begin(), order_.end(), 0);
  auto more_likely = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  // The filters need the candidates in order, most likely first.
  int64_t kept = vocab;
  if (options_.top_k > 0 && options_.top_k < vocab) {
    kept = options_.top_k;
    std::partial_sort(order_.begin(), order_.begin() + kept, order_.end(), more_likely);
  } else if (options_.top_p < 1) {
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  // softmax(logits / temperature), unnormalised, in double.
  weights_.resize(static_cast<size_t>(kept));
  double total = 0;
  for (int64_t i = 0; i < kept; ++i) {
    weights_[i] =
        std::exp((static_cast<double>(logits[order_[i]]) - logits[best]) / options_.temperature);
    total += weights_[i];
  }
  if (options_.top_p < 1) {  // the shortest prefix holding top_p of the probability
    double mass = 0;
    for (int64_t i = 0; i < kept; ++i) {
      mass += weights_[i];
      if (mass >= options_.top_p * total) {
        kept = i + 1;
        break;
      }
    }
    total = mass;
  }
  // A uniform double in [0, 1) from the top 53 bits.
  const double u = static_cast<double>(generator_() >> 11) * 0x1.0p-53 * total;
  double mass = 0;
  for (int64_t i = 0; i < kept; ++i) {
    mass += weights_[i];
    if (u < mass) return order_[i];
  }
  return order_[kept - 1];  // u rounded up to the total
}

}  // namespace remat
