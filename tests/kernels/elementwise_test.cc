// SwiGLU gate, residual add and cross-entropy.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <utility>
#include <vector>

#include "kernels/cpu/bf16.h"
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

// The formula's IEEE operations one at a time: one lane of exp256, then
// single-lane SSE arithmetic, which no compiler contracts into an FMA.
float sse_add(float x, float y) { return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(x), _mm_set_ss(y))); }
float sse_sub(float x, float y) { return _mm_cvtss_f32(_mm_sub_ss(_mm_set_ss(x), _mm_set_ss(y))); }
float sse_mul(float x, float y) { return _mm_cvtss_f32(_mm_mul_ss(_mm_set_ss(x), _mm_set_ss(y))); }
float sse_div(float x, float y) { return _mm_cvtss_f32(_mm_div_ss(_mm_set_ss(x), _mm_set_ss(y))); }

// silu(a) * b and, for the output gradient g, what the backward adds to da
// and db.
struct SiluMulBits {
  float out, ga, gb;
};
SiluMulBits silu_mul_bits(float a, float b, float g) {
  const float den = sse_add(1.0f, detail::exp_scalar(sse_sub(0.0f, a)));
  const float silu = sse_div(a, den), s = sse_div(1.0f, den);
  const float dsilu = sse_mul(s, sse_add(1.0f, sse_mul(a, sse_sub(1.0f, s))));
  return {sse_mul(silu, b), sse_mul(sse_mul(g, b), dsilu), sse_mul(g, silu)};
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
// The executor hands the backward its saved a and b as their own fresh
// gradients (OpInfo::grads_over_saved_inputs): written over them in place,
// the gradients have the bits of separate buffers, at every tail length and
// on the threaded path.
TEST(SiluMul, FreshGradientsOverTheirInputsHaveTheBitsOfSeparateOnes) {
  for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 40, 70001}) {
    SCOPED_TRACE(n);
    const auto a = random_vector(n, 20), b = random_vector(n, 21), r = random_vector(n, 22);
    std::vector<float> da(n, NAN), db(n, NAN);
    silu_mul_backward(r.data(), a.data(), b.data(), n, da.data(), db.data(), 0b11);
    std::vector<float> ga = a, gb = b;  // the inputs, overwritten by their gradients
    silu_mul_backward(r.data(), ga.data(), gb.data(), n, ga.data(), gb.data(), 0b11);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(ga[i]), std::bit_cast<uint32_t>(da[i])) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(gb[i]), std::bit_cast<uint32_t>(db[i])) << i;
    }
  }
}

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
  std::vector<float> out(n), da_fresh(n), db_fresh(n), da(n), db(n);
  for (int64_t i = 0; i < n; ++i) {
    const SiluMulBits r = silu_mul_bits(a[i], b[i], g[i]);
    out[i] = r.out;
    da_fresh[i] = sse_add(0.0f, r.ga);
    db_fresh[i] = sse_add(0.0f, r.gb);
    da[i] = sse_add(da0[i], r.ga);
    db[i] = sse_add(db0[i], r.gb);
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

// Every tail length a block can end with, on either lane count (1..40
// elements: none, one or two whole vectors of 16 or 8, then the tail): the
// tail's lanes have the formula's bits, fp32 and bf16, and nothing past n
// is written (a masked store that overran would change the guard).
TEST(SiluMul, EveryTailLengthHasTheFormulasBitsAndWritesNothingPastIt) {
  constexpr int64_t kGuard = 17;
  const float guard = 12288.0f;  // exact in bf16 too
  const bf16 guard16 = to_bf16(guard);
  for (int64_t n = 1; n <= 40; ++n) {
    const std::vector<float> a32 = random_vector(n, 40 + n, 6.0f), b32 = random_vector(n, 90 + n),
                             g = random_vector(n, 140 + n), da0 = random_vector(n, 190 + n);
    std::vector<bf16> a16(n), b16(n);
    std::vector<float> a(n), b(n);  // the bf16 operands' values
    for (int64_t i = 0; i < n; ++i) {
      a16[i] = to_bf16(a32[i]);
      b16[i] = to_bf16(b32[i]);
      a[i] = from_bf16(a16[i]);
      b[i] = from_bf16(b16[i]);
    }
    // Reads every lane of out[0, n) and of the guard after it.
    auto check = [&](const std::vector<float>& got, const std::vector<float>& want,
                     const char* what) {
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(testing::bit_identical({got[i]}, {want[i]}))
            << what << " n " << n << " i " << i;
      for (int64_t i = n; i < n + kGuard; ++i) ASSERT_EQ(got[i], guard) << what << " n " << n;
    };
    std::vector<float> out(n), out16(n), da(n), db(n);
    for (int64_t i = 0; i < n; ++i) {
      const SiluMulBits r = silu_mul_bits(a[i], b[i], g[i]);
      out[i] = r.out;
      out16[i] = from_bf16(to_bf16(r.out));
      da[i] = sse_add(da0[i], r.ga);
      db[i] = sse_add(0.0f, r.gb);
    }
    // The public kernels (16 lanes where the CPU has them, 8 under
    // REMAT_MAX_ISA=avx2: ctest's kernels_avx2), then the 16-lane entry
    // points directly; each on fp32, then bf16 operands.
    for (bool lanes16 : {false, true}) {
      if (lanes16 && !detail::avx512_kernels()) continue;
      std::vector<float> got(n + kGuard, guard);
      if (lanes16)
        detail::silu_mul_forward_avx512(a.data(), b.data(), n, got.data());
      else
        silu_mul_forward(a.data(), b.data(), n, got.data());
      check(got, out, "fp32 forward");
      std::vector<float> gda(n + kGuard, guard), gdb(n + kGuard, guard);
      std::copy(da0.begin(), da0.end(), gda.begin());
      if (lanes16)
        detail::silu_mul_backward_avx512(g.data(), a.data(), b.data(), n, gda.data(), gdb.data(),
                                         2);
      else
        silu_mul_backward(g.data(), a.data(), b.data(), n, gda.data(), gdb.data(), 2);
      check(gda, da, "fp32 accumulated da");
      check(gdb, db, "fp32 fresh db");
      std::vector<bf16> got16(n + kGuard, guard16);
      if (lanes16) {
        detail::silu_mul_forward_avx512(a16.data(), b16.data(), n, got16.data());
      } else {
        silu_mul_forward_act({a16.data(), true}, {b16.data(), true}, n, {got16.data(), true});
      }
      std::vector<float> widened(n + kGuard);
      for (int64_t i = 0; i < n + kGuard; ++i) widened[i] = from_bf16(got16[i]);
      check(widened, out16, "bf16 forward");
      std::fill(gda.begin(), gda.end(), guard);
      std::fill(gdb.begin(), gdb.end(), guard);
      std::copy(da0.begin(), da0.end(), gda.begin());
      if (lanes16) {
        detail::silu_mul_backward_avx512(g.data(), a16.data(), b16.data(), n, gda.data(),
                                         gdb.data(), 2);
      } else {
        silu_mul_backward_act(g.data(), {a16.data(), true}, {b16.data(), true}, n, gda.data(),
                              gdb.data(), 2);
      }
      check(gda, da, "bf16 accumulated da");
      check(gdb, db, "bf16 fresh db");
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

// One gradient null (the executor handed dout's buffer to that input): the
// other is written, fresh or accumulated, and nothing else is touched.
TEST(Add, BackwardWithOneGradientWritesOnlyThatOne) {
  const int64_t n = 70001;  // past kParallelMin: the threaded loop
  auto r = random_vector(n, 12), start = random_vector(n, 13);
  for (int which = 0; which < 2; ++which) {
    for (uint32_t fresh : {0u, 3u}) {
      std::vector<float> g = fresh != 0 ? std::vector<float>(n, NAN) : start;
      float* da = which == 0 ? g.data() : nullptr;
      float* db = which == 1 ? g.data() : nullptr;
      add_backward(r.data(), n, da, db, fresh);
      for (int64_t i = 0; i < n; ++i) {
        const float want = (fresh != 0 ? 0.0f : start[i]) + r[i];
        ASSERT_EQ(g[i], want) << "gradient " << which << " fresh " << fresh << " at " << i;
      }
    }
  }
  add_backward(r.data(), n, nullptr, nullptr, 3);  // neither: nothing to write
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
