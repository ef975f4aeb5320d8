// The sampler: greedy is the argmax (ties to the lower id), top_k = 1 is
// greedy whatever the seed and temperature, a seed gives the same tokens
// every time, the filters keep only what they should, and the frequencies
// follow softmax(logits / temperature).
#include "generate/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

namespace remat {
namespace {

std::vector<float> random_logits(int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<int32_t> draw(SamplingOptions options, const std::vector<float>& logits, int n) {
  Sampler sampler(options);
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(sampler.next(logits));
  return ids;
}

TEST(Sampler, GreedyIsTheArgmaxWithTiesToTheLowerId) {
  SamplingOptions greedy;
  greedy.temperature = 0;
  Sampler sampler(greedy);
  EXPECT_EQ(sampler.next(std::vector<float>{1, 3, 2, 3}), 1);
  EXPECT_EQ(sampler.next(std::vector<float>{-5}), 0);
  const std::vector<float> logits = random_logits(1000, 1);
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  EXPECT_EQ(sampler.next(logits), best);
}

TEST(Sampler, TopKOneIsGreedyForAnySeedAndTemperature) {
  for (uint32_t round = 0; round < 20; ++round) {
    std::vector<float> logits = random_logits(500, round);
    logits[round * 7] = logits[round * 7 + 3] = 30.0f;  // a tie for the first place
    SamplingOptions greedy;
    greedy.temperature = 0;
    SamplingOptions top1;
    top1.top_k = 1;
    top1.temperature = 0.5 + round;
    top1.seed = round;
    EXPECT_EQ(draw(top1, logits, 5), draw(greedy, logits, 5));
    EXPECT_EQ(draw(greedy, logits, 1)[0], static_cast<int32_t>(round * 7));
  }
}

TEST(Sampler, TheSameSeedGivesTheSameTokens) {
  const std::vector<float> logits = random_logits(300, 2);
  SamplingOptions a;
  a.seed = 42;
  a.top_p = 0.9;
  a.top_k = 50;
  EXPECT_EQ(draw(a, logits, 200), draw(a, logits, 200));
  SamplingOptions b = a;
  b.seed = 43;
  EXPECT_NE(draw(a, logits, 200), draw(b, logits, 200));
}

TEST(Sampler, FiltersKeepOnlyTheMostLikely) {
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 1.0f, 4.5f};
  SamplingOptions top2;
  top2.top_k = 2;
  top2.temperature = 100;  // nearly uniform over what the filter keeps
  const std::vector<int32_t> ids = draw(top2, logits, 400);
  EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()), (std::set<int32_t>{1, 4}));
  // softmax probabilities: 0.50, 0.30, 0.18, ... top_p 0.7 keeps ids 1 and 4.
  SamplingOptions nucleus;
  nucleus.top_p = 0.7;
  const std::vector<int32_t> kept = draw(nucleus, logits, 400);
  EXPECT_EQ(std::set<int32_t>(kept.begin(), kept.end()), (std::set<int32_t>{1, 4}));
  nucleus.top_p = 1e-9;  // only the most likely token is left
  EXPECT_EQ(draw(nucleus, logits, 50), std::vector<int32_t>(50, 1));
}

TEST(Sampler, FrequenciesFollowTheTemperedSoftmax) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  for (double temperature : {1.0, 2.0}) {
    SamplingOptions options;
    options.temperature = temperature;
    options.seed = 9;
    const int n = 40000;
    std::vector<int> counts(3);
    for (int32_t id : draw(options, logits, n)) ++counts[id];
    double total = 0;
    for (float l : logits) total += std::exp(l / temperature);
    for (int i = 0; i < 3; ++i) {
      const double p = std::exp(logits[i] / temperature) / total;
      EXPECT_NEAR(static_cast<double>(counts[i]) / n, p, 0.01) << "temperature " << temperature;
    }
  }
}

TEST(Sampler, NonFiniteLogitsAreAnError) {
  Sampler sampler(SamplingOptions{});
  EXPECT_THROW(sampler.next(std::vector<float>{0, std::numeric_limits<float>::quiet_NaN()}),
               std::runtime_error);
  EXPECT_THROW(sampler.next(std::vector<float>{}), std::invalid_argument);
}

}  // namespace
}  // namespace remat
