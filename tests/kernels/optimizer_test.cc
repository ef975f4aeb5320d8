// sum_squares, scale_inplace, AdamW, threads and the peak-FLOPs probe.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::random_vector;
using testing::ThreadsGuard;

TEST(SumSquares, MatchesNaiveAndIsThreadIndependent) {
  for (int64_t n : {0, 1, 7, 4096, 4097, 3 * 256 * 4096 + 11}) {
    auto x = random_vector(n, 1);
    long double ref = 0.0L;
    for (float v : x) ref += static_cast<long double>(v) * v;
    double a, b, c;
    {
      ThreadsGuard t(2);
      a = sum_squares(x.data(), n);
      b = sum_squares(x.data(), n);
    }
    {
      ThreadsGuard t(1);
      c = sum_squares(x.data(), n);
    }
    EXPECT_NEAR(a, static_cast<double>(ref), 1e-12 * (1.0 + static_cast<double>(ref))) << n;
    EXPECT_EQ(a, b);
    EXPECT_EQ(a, c);
  }
}

TEST(ScaleInplace, Scales) {
  auto x = random_vector(100001, 2);
  auto y = x;
  scale_inplace(y.data(), y.size(), 0.25f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] * 0.25f);
}

// Two steps against the formula of torch.optim.AdamW evaluated in double.
TEST(AdamW, MatchesTorchFormula) {
  const int64_t n = 1001;
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  auto p = random_vector(n, 3);
  auto g1 = random_vector(n, 4), g2 = random_vector(n, 5, 0.01f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  int64_t step = 0;
  for (const auto* g : {&g1, &g2}) {
    ++step;
    adamw_update(p.data(), g->data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, step, 1.0f);
    const double bc1 = 1.0 - std::pow(double(b1), step), bc2 = 1.0 - std::pow(double(b2), step);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = (*g)[i];
      pd[i] *= 1.0 - double(lr) * wd;
      md[i] = b1 * md[i] + (1.0 - b1) * gi;
      vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
      const double denom = std::sqrt(vd[i]) / std::sqrt(bc2) + eps;
      pd[i] -= (lr / bc1) * md[i] / denom;
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(m[i], md[i], 1e-6 * (1.0 + std::fabs(md[i]))) << i;
      ASSERT_NEAR(v[i], vd[i], 1e-6 * (1.0 + std::fabs(vd[i]))) << i;
      ASSERT_NEAR(p[i], pd[i], 1e-6 * (1.0 + std::fabs(pd[i]))) << i;
    }
  }
  // The first step moves every parameter by about lr (the update is m/sqrt(v)).
  auto q = random_vector(n, 6);
  auto q0 = q;
  std::vector<float> m1(n, 0.0f), v1(n, 0.0f);
  adamw_update(q.data(), g1.data(), m1.data(), v1.data(), n, lr, b1, b2, eps, 0.0f, 1, 1.0f);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(std::fabs(q[i] - q0[i]), lr, 1e-3 * lr + 1e-6) << i;
}

// Clipping's factor applied as AdamW reads the gradients leaves the bits
// that scaling them in place first (clip_grad_norm_'s way) leaves.
TEST(AdamW, GradScaleMatchesScalingTheGradientsFirst) {
  const int64_t n = 1001;  // a scalar tail after the vector blocks
  const float scale = 0.3712f;
  const auto g = random_vector(n, 7);
  auto scaled = g;
  scale_inplace(scaled.data(), n, scale);
  auto p1 = random_vector(n, 8), p2 = p1;
  std::vector<float> m1(n, 0.0f), v1(n, 0.0f), m2(n, 0.0f), v2(n, 0.0f);
  for (int64_t step = 1; step <= 2; ++step) {
    adamw_update(p1.data(), scaled.data(), m1.data(), v1.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                 step, 1.0f);
    adamw_update(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                 step, scale);
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  // From zero moments the first step's m is (1 - beta1) * (g * scale).
  const float w1 = static_cast<float>(1.0 - static_cast<double>(0.9f));
  std::vector<float> m3(n, 0.0f), v3(n, 0.0f);
  auto p3 = random_vector(n, 8);
  adamw_update(p3.data(), g.data(), m3.data(), v3.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1,
               scale);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(m3[i], w1 * (g[i] * scale)) << i;
}

TEST(Threads, SetAndGet) {
  const int saved = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(saved);
  EXPECT_EQ(num_threads(), saved);
}

TEST(PeakFlops, PositiveAndPlausible) {
  const double one = measure_peak_flops(1, 0.1);
  EXPECT_GT(one, 1e9);
  EXPECT_LT(one, 1e12);  // one AVX2 core: a few tens of GFLOP/s
  const double two = measure_peak_flops(2, 0.1);
  EXPECT_GT(two, 1e9);
  std::printf("  peak fp32 FMA: %.1f GFLOP/s (1 thread), %.1f GFLOP/s (2 threads)\n", one / 1e9,
              two / 1e9);
}

}  // namespace
}  // namespace remat::cpu
