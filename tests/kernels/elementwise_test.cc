// SwiGLU gate, residual add and cross-entropy.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::check_gradient;
using testing::random_tokens;
using testing::random_vector;
using testing::ThreadsGuard;
using testing::weighted_sum;

// ---------------------------------------------------------------- silu_mul

TEST(SiluMul, ForwardMatchesFormula) {
  const int64_t n = 1003;  // vector body and scalar tail
  auto a = random_vector(n, 1, 4.0f), b = random_vector(n, 2);
  a[0] = -100.0f;  // exp(-a) clamps: silu -> -0
  a[1] = 100.0f;
  std::vector<float> out(n);
  silu_mul_forward(a.data(), b.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    const double expect = x / (1.0 + std::exp(-x)) * b[i];
    EXPECT_NEAR(out[i], expect, 2e-6 * (1.0 + std::fabs(expect))) << i;
  }
}

TEST(SiluMul, GradientsMatchFiniteDifferences) {
  ThreadsGuard one(1);
  const int64_t n = 45;
  auto a = random_vector(n, 3, 2.0f), b = random_vector(n, 4), r = random_vector(n, 5);
  std::vector<float> da(n, 0.0f), db(n, 0.0f), out(n);
  silu_mul_backward(r.data(), a.data(), b.data(), n, da.data(), db.data());
  auto loss = [&] {
    silu_mul_forward(a.data(), b.data(), n, out.data());
    return weighted_sum(out, r);
  };
  check_gradient("silu_mul da", a, da, loss, 1e-2f, 1e-3);
  check_gradient("silu_mul db", b, db, loss, 1e-2f, 1e-3);
}

TEST(SiluMul, BackwardAccumulatesAndIsDeterministic) {
  const int64_t n = 100003;
  auto a = random_vector(n, 6, 3.0f), b = random_vector(n, 7), g = random_vector(n, 8);
  auto run = [&](int threads) {
    ThreadsGuard t(threads);
    std::vector<float> da(n, 0.0f), db(n, 0.0f), out(n);
    silu_mul_forward(a.data(), b.data(), n, out.data());
    silu_mul_backward(g.data(), a.data(), b.data(), n, da.data(), db.data());
    return std::vector<std::vector<float>>{out, da, db};
  };
  auto x = run(2), y = run(2), z = run(1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(testing::bit_identical(x[i], y[i]));
    EXPECT_TRUE(testing::bit_identical(x[i], z[i]));
  }
  auto da = x[1], db = x[2];
  silu_mul_backward(g.data(), a.data(), b.data(), n, da.data(), db.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(da[i], 2.0f * x[1][i]);
    ASSERT_EQ(db[i], 2.0f * x[2][i]);
  }
}

// ---------------------------------------------------------------- add

TEST(Add, ForwardAndGradients) {
  ThreadsGuard one(1);
  const int64_t n = 23;
  auto a = random_vector(n, 10), b = random_vector(n, 11), r = random_vector(n, 12);
  std::vector<float> out(n), da(n, 0.0f), db(n, 0.0f);
  add_forward(a.data(), b.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  add_backward(r.data(), n, da.data(), db.data());
  auto loss = [&] {
    add_forward(a.data(), b.data(), n, out.data());
    return weighted_sum(out, r);
  };
  check_gradient("add da", a, da, loss, 1e-2f, 1e-3);
  check_gradient("add db", b, db, loss, 1e-2f, 1e-3);
  add_backward(r.data(), n, da.data(), db.data());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(da[i], 2.0f * r[i]);
    EXPECT_EQ(db[i], 2.0f * r[i]);
  }
}

// ---------------------------------------------------------------- cross-entropy

double naive_cross_entropy(const std::vector<float>& logits, const std::vector<int32_t>& targets,
                           int64_t rows, int64_t vocab, std::vector<double>* lse) {
  double loss = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, double(logits[r * vocab + j]));
    double s = 0.0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(logits[r * vocab + j] - mx);
    const double l = mx + std::log(s);
    if (lse != nullptr) lse->push_back(l);
    loss += l - logits[r * vocab + targets[r]];
  }
  return loss / rows;
}

TEST(CrossEntropy, ForwardMatchesNaive) {
  const int64_t rows = 13, vocab = 517;  // vector body and scalar tail
  auto logits = random_vector(rows * vocab, 20, 3.0f);
  logits[5] = 80.0f;  // a dominant logit must not overflow
  auto targets = random_tokens(rows, vocab, 21);
  std::vector<float> lse(rows);
  const double loss = cross_entropy_forward(logits.data(), targets.data(), rows, vocab, lse.data());
  std::vector<double> ref_lse;
  const double ref = naive_cross_entropy(logits, targets, rows, vocab, &ref_lse);
  EXPECT_NEAR(loss, ref, 1e-5 * std::fabs(ref));
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_NEAR(lse[r], ref_lse[r], 1e-5 * (1 + std::fabs(ref_lse[r])));
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  ThreadsGuard one(1);
  const int64_t rows = 5, vocab = 19;
  auto logits = random_vector(rows * vocab, 22, 2.0f);
  auto targets = random_tokens(rows, vocab, 23);
  std::vector<float> lse(rows);
  cross_entropy_forward(logits.data(), targets.data(), rows, vocab, lse.data());
  auto grad = logits;
  cross_entropy_backward_inplace(grad.data(), targets.data(), lse.data(), rows, vocab, 1.0f / rows);
  std::vector<float> lse2(rows);
  auto loss = [&] {
    return cross_entropy_forward(logits.data(), targets.data(), rows, vocab, lse2.data());
  };
  // Tolerance relative to max(1, |grad|); these gradients are <= 1/rows.
  check_gradient("cross_entropy dlogits", logits, grad, loss, 1e-2f, 2e-4);
  // Rows of (softmax - onehot) sum to zero.
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int64_t j = 0; j < vocab; ++j) s += grad[r * vocab + j];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
}

TEST(CrossEntropy, BackwardMatchesSoftmaxAndIsDeterministic) {
  const int64_t rows = 64, vocab = 1000;
  auto logits = random_vector(rows * vocab, 24, 2.0f);
  auto targets = random_tokens(rows, vocab, 25);
  auto run = [&](int threads) {
    ThreadsGuard t(threads);
    std::vector<float> lse(rows);
    auto g = logits;
    const double loss = cross_entropy_forward(g.data(), targets.data(), rows, vocab, lse.data());
    cross_entropy_backward_inplace(g.data(), targets.data(), lse.data(), rows, vocab, 0.5f);
    return std::make_pair(loss, g);
  };
  auto a = run(2), b = run(2), c = run(1);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.first, c.first);
  EXPECT_TRUE(testing::bit_identical(a.second, b.second));
  EXPECT_TRUE(testing::bit_identical(a.second, c.second));
  std::vector<double> ref_lse;
  naive_cross_entropy(logits, targets, rows, vocab, &ref_lse);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < vocab; ++j) {
      const double p = std::exp(logits[r * vocab + j] - ref_lse[r]);
      const double expect = (p - (j == targets[r] ? 1.0 : 0.0)) * 0.5;
      ASSERT_NEAR(a.second[r * vocab + j], expect, 1e-6);
    }
}

TEST(CrossEntropy, RejectsOutOfRangeTargets) {
  std::vector<float> logits(2 * 3, 0.0f), lse(2);
  std::vector<int32_t> targets = {0, 3};
  EXPECT_THROW(cross_entropy_forward(logits.data(), targets.data(), 2, 3, lse.data()),
               std::out_of_range);
}

}  // namespace
}  // namespace remat::cpu
