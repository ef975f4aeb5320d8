// SwiGLU gate, residual add and cross-entropy.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <iterator>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
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

// The vector bodies (16 lanes where the CPU has AVX-512, 8 under
// REMAT_MAX_ISA=avx2: ctest runs this file both ways, kernels_avx2) give
// each element, ragged tails included, the bits of the formula's IEEE
// operations one at a time (one lane of exp256, then single-lane SSE
// arithmetic, which no compiler contracts into an FMA): so the two
// instantiations agree bit for bit, whichever a CPU takes. Inputs span the
// exp clamp (+-88), infinities, NaN, -0, denormals and ordinary values, in
// a length with a tail; the 16-lane entry points are also called directly
// where the CPU has them.
TEST(SiluMul, EveryLaneHasTheBitsOfTheScalarFormula) {
  const int64_t n = 4096 + 1000 + 13;  // a whole block, then a ragged one
  std::vector<float> a = random_vector(n, 31, 12.0f), b = random_vector(n, 32, 3.0f);
  const std::vector<float> g = random_vector(n, 33), da0 = random_vector(n, 34),
                           db0 = random_vector(n, 35);
  const float specials[] = {0.0f,     -0.0f,     88.0f, -88.0f, 87.9f,   -87.9f, 100.0f, -100.0f,
                            INFINITY, -INFINITY, NAN,   1e-40f, -1e-40f, 1e-30f, 3e38f,  -3e38f};
  for (size_t s = 0; s < std::size(specials); ++s) {
    a[s * 7] = specials[s];          // in the first vectors
    a[4096 + s * 5] = specials[s];   // in the second block
    a[n - 1 - s % 5] = specials[s];  // in the ragged tail
    b[s * 11 + 3] = specials[(s + 5) % std::size(specials)];
  }
  auto add = [](float x, float y) {
    return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(x), _mm_set_ss(y)));
  };
  auto sub = [](float x, float y) {
    return _mm_cvtss_f32(_mm_sub_ss(_mm_set_ss(x), _mm_set_ss(y)));
  };
  auto mul = [](float x, float y) {
    return _mm_cvtss_f32(_mm_mul_ss(_mm_set_ss(x), _mm_set_ss(y)));
  };
  auto div = [](float x, float y) {
    return _mm_cvtss_f32(_mm_div_ss(_mm_set_ss(x), _mm_set_ss(y)));
  };
  std::vector<float> out(n), da_fresh(n), db_fresh(n), da(n), db(n);
  for (int64_t i = 0; i < n; ++i) {
    const float ai = a[i], bi = b[i];
    const float den = add(1.0f, detail::exp_scalar(sub(0.0f, ai)));
    const float silu = div(ai, den), s = div(1.0f, den);
    const float dsilu = mul(s, add(1.0f, mul(ai, sub(1.0f, s))));
    const float ga = mul(mul(g[i], bi), dsilu), gb = mul(g[i], silu);
    out[i] = mul(silu, bi);
    da_fresh[i] = add(0.0f, ga);
    db_fresh[i] = add(0.0f, gb);
    da[i] = add(da0[i], ga);
    db[i] = add(db0[i], gb);
  }
  using Forward = void (*)(const float*, const float*, int64_t, float*);
  using Backward =
      void (*)(const float*, const float*, const float*, int64_t, float*, float*, uint32_t);
  std::vector<std::pair<Forward, Backward>> kernels{
      {silu_mul_forward, [](const float* d, const float* x, const float* y, int64_t m, float* dx,
                            float* dy, uint32_t f) { silu_mul_backward(d, x, y, m, dx, dy, f); }}};
  if (detail::avx512_kernels()) {
    kernels.emplace_back(static_cast<Forward>(detail::silu_mul_forward_avx512),
                         static_cast<Backward>(detail::silu_mul_backward_avx512));
  }
  for (size_t k = 0; k < kernels.size(); ++k) {
    for (int threads : {1, 2}) {
      ThreadsGuard guard(threads);
      std::vector<float> got(n, NAN);
      kernels[k].first(a.data(), b.data(), n, got.data());
      EXPECT_TRUE(testing::bit_identical(got, out)) << "forward, kernel " << k;
      std::vector<float> gda(n, NAN), gdb(n, NAN);
      kernels[k].second(g.data(), a.data(), b.data(), n, gda.data(), gdb.data(), 3);
      EXPECT_TRUE(testing::bit_identical(gda, da_fresh)) << "fresh da, kernel " << k;
      EXPECT_TRUE(testing::bit_identical(gdb, db_fresh)) << "fresh db, kernel " << k;
      gda = da0;
      gdb = db0;
      kernels[k].second(g.data(), a.data(), b.data(), n, gda.data(), gdb.data(), 0);
      EXPECT_TRUE(testing::bit_identical(gda, da)) << "accumulated da, kernel " << k;
      EXPECT_TRUE(testing::bit_identical(gdb, db)) << "accumulated db, kernel " << k;
    }
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
