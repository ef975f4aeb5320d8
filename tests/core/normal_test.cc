// The ziggurat sampler against the normal distribution it claims to draw:
// the Kolmogorov-Smirnov distance of a million draws from Phi, the mass of
// each layer's region (the wedges and the tail are where a ziggurat goes
// wrong), mean, variance and symmetry; and its determinism per seed.
#include "core/normal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace remat {
namespace {

double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

std::vector<double> draws(uint64_t seed, int n) {
  StandardNormal normal(seed);
  std::vector<double> out(static_cast<size_t>(n));
  for (double& x : out) x = normal();
  return out;
}

TEST(StandardNormal, MatchesTheNormalDistribution) {
  const int n = 1 << 20;
  std::vector<double> x = draws(7, n);
  double sum = 0, sum_sq = 0, sum_cube = 0;
  for (double v : x) {
    sum += v;
    sum_sq += v * v;
    sum_cube += v * v * v;
  }
  // Standard errors: 1/sqrt(n) for the mean, sqrt(2/n) for the variance,
  // sqrt(15/n) for the third moment. Five of them: a correct sampler fails
  // with probability below 1e-6.
  EXPECT_NEAR(sum / n, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(sum_sq / n, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(sum_cube / n, 0.0, 5 * std::sqrt(15.0 / n));

  // Kolmogorov-Smirnov: the largest gap between the empirical CDF and Phi.
  // 1.95 / sqrt(n) is the 0.1% critical value.
  std::sort(x.begin(), x.end());
  double gap = 0;
  for (int i = 0; i < n; ++i) {
    const double p = phi(x[static_cast<size_t>(i)]);
    gap = std::max({gap, p - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - p});
  }
  EXPECT_LT(gap, 1.95 / std::sqrt(n));
}

// Bins that split the ziggurat's regions: the centre, the wedges of the
// upper layers, the edge of the base layer (3.654...) and the tail beyond
// it. Each bin's count against n times its probability, within 5 binomial
// standard deviations.
TEST(StandardNormal, EachRegionHasItsMass) {
  const int n = 1 << 24;
  const std::vector<double> x = draws(11, n);
  const double edge = 3.6541528853610088;
  const std::vector<double> edges = {-1e9, -4.2, -3.9, -edge, -3.0, -2.0, -1.0, -0.5, 0.0,
                                     0.5,  1.0,  2.0,  3.0,   edge, 3.9,  4.2,  1e9};
  std::vector<int64_t> counts(edges.size() - 1, 0);
  for (double v : x) {
    const auto it = std::upper_bound(edges.begin(), edges.end(), v);
    counts[static_cast<size_t>(it - edges.begin() - 1)]++;
  }
  for (size_t b = 0; b + 1 < edges.size(); ++b) {
    const double p = phi(edges[b + 1]) - phi(edges[b]);
    const double expected = n * p;
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(counts[b]), expected, 5 * sd + 1)
        << "[" << edges[b] << ", " << edges[b + 1] << ")";
  }
}

TEST(StandardNormal, TheSameSeedGivesTheSameDrawsAndAnotherSeedOthers) {
  EXPECT_EQ(draws(3, 1000), draws(3, 1000));
  EXPECT_NE(draws(3, 1000), draws(4, 1000));
}

}  // namespace
}  // namespace remat
