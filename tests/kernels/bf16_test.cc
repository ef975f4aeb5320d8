// bf16 conversions and GEMMs (kernels/cpu/bf16.h) against an fp64 reference,
// on every implementation: the fallback everywhere, oneDNN's matmul and the
// native AVX512-BF16 kernel where the CPU has them (skipped elsewhere, saying
// why).
#include "kernels/cpu/bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::bits;
using testing::random_vector;
using testing::ThreadsGuard;

std::vector<bf16> random_bf16(int64_t n, uint32_t seed) {
  const std::vector<float> f = random_vector(n, seed);
  std::vector<bf16> out(f.size());
  narrow_to_bf16(f.data(), n, out.data());
  return out;
}

TEST(Bf16Convert, RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f), to_bf16(1.0f));
  // Just above halfway rounds up; 1 + 3 * 2^-8 is halfway to an even upper neighbour.
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(from_bf16(to_bf16(-2.5f)), -2.5f);
  // Denormals are kept (not flushed) and rounded like any other value.
  EXPECT_EQ(from_bf16(to_bf16(0x1p-130f)), 0x1p-130f);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest finite floats round to infinity, as IEEE rounding does.
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::max()))));
}

TEST(Bf16Convert, WidenIsExactAndNarrowInvertsIt) {
  std::vector<bf16> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<bf16>(i);
  std::vector<float> wide(all.size());
  widen_from_bf16(all.data(), static_cast<int64_t>(all.size()), wide.data());
  std::vector<bf16> back(all.size());
  narrow_to_bf16(wide.data(), static_cast<int64_t>(all.size()), back.data());
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::isnan(wide[i])) continue;
    ASSERT_EQ(back[i], all[i]) << i;
  }
}

// The 8-lane conversions (load_bf16x8, store_bf16x8) give the scalar ones'
// bits lane by lane: every bf16 widened, and fp32 patterns around each
// rounding boundary (ties both ways, NaNs with low payload bits only,
// infinities, denormals, signed zeros, the largest finite floats).
TEST(Bf16Convert, EightLaneConversionsMatchTheScalarOnes) {
  for (uint32_t h = 0; h < (1u << 16); h += 8) {
    bf16 in[8];
    for (uint32_t j = 0; j < 8; ++j) in[j] = static_cast<bf16>(h + j);
    float lanes[8];
    _mm256_storeu_ps(lanes, load_bf16x8(in));
    for (int j = 0; j < 8; ++j) {
      const float one = from_bf16(in[j]);
      ASSERT_EQ(std::memcmp(&lanes[j], &one, sizeof one), 0) << h + j;
    }
  }
  std::vector<uint32_t> patterns;
  for (uint32_t upper = 0; upper < (1u << 16); upper += 7) {
    for (uint32_t lower : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      patterns.push_back((upper << 16) | lower);
  }
  for (uint32_t special : {0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0xffffffffu,
                           0x7f7fffffu, 0x80000000u, 0x00000001u, 0x807fffffu})
    patterns.push_back(special);
  while (patterns.size() % 8 != 0) patterns.push_back(0);
  for (size_t i = 0; i < patterns.size(); i += 8) {
    float x[8];
    std::memcpy(x, patterns.data() + i, sizeof x);
    bf16 lanes[8];
    store_bf16x8(lanes, _mm256_loadu_ps(x));
    for (int j = 0; j < 8; ++j) ASSERT_EQ(lanes[j], to_bf16(x[j])) << std::hex << patterns[i + j];
  }
}

// C = beta * C0 + op(A) op(B) in fp64 from the same bf16 inputs, and the
// bound sum_k |a b| that fp32 accumulation errors scale with.
struct Reference {
  std::vector<double> c, magnitude;
};

Reference reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const std::vector<bf16>& a,
                    const std::vector<bf16>& b, float beta, const std::vector<float>& c0) {
  Reference r{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = beta * c0[i * n + j], mag = std::fabs(s);
      for (int64_t p = 0; p < k; ++p) {
        const double x = from_bf16(ta ? a[p * m + i] : a[i * k + p]);
        const double y = from_bf16(tb ? b[j * k + p] : b[p * n + j]);
        s += x * y;
        mag += std::fabs(x * y);
      }
      r.c[i * n + j] = s;
      r.magnitude[i * n + j] = mag;
    }
  }
  return r;
}

std::vector<Bf16Gemm> available() {
  std::vector<Bf16Gemm> g{Bf16Gemm::kFallback};
  if (cpu_has_avx512_bf16()) g.push_back(Bf16Gemm::kNative);
  if (detail::onednn_bf16_available()) g.push_back(Bf16Gemm::kOnednn);
  return g;
}

// bf16 products are exact in fp32; accumulating k of them onto C in fp32
// errs by at most (k + 1) * 2^-24 * (|C| + sum |a b|) (recursive summation,
// first order), which each element is held to. A wrong index or a lost
// k-block errs by O(1).
TEST(Bf16Gemm, MatchesFp64ReferenceInEveryLayout) {
  // oneDNN's cut (gemm_onednn.h): ragged blocks padded in M and K, several
  // blocks along both in the last shape.
  const int64_t shapes[][3] = {
      {1, 1, 1}, {13, 33, 7}, {40, 70, 513}, {97, 31, 300}, {300, 20, 700}};
  for (Bf16Gemm gemm : available()) {
    for (const auto& s : shapes) {
      const int64_t m = s[0], n = s[1], k = s[2];
      for (int layout = 0; layout < 8; ++layout) {
        const bool ta = layout & 1, tb = layout & 2;
        const float beta = layout & 4 ? 1.0f : 0.0f;
        const std::vector<bf16> a = random_bf16(m * k, 1), b = random_bf16(k * n, 2);
        std::vector<float> c = random_vector(m * n, 3);
        const Reference ref = reference(ta, tb, m, n, k, a, b, beta, c);
        gemm_bf16_with(gemm, ta, tb, m, n, k, a.data(), ta ? m : k, b.data(), tb ? k : n, beta,
                       c.data(), n);
        for (int64_t i = 0; i < m * n; ++i) {
          const double tolerance = static_cast<double>(k + 1) * 0x1p-24 * ref.magnitude[i];
          ASSERT_NEAR(c[i], ref.c[i], tolerance + 1e-30)
              << to_string(gemm) << " m " << m << " n " << n << " k " << k << " layout " << layout;
        }
      }
    }
  }
}

// Unset, REMAT_BF16_KERNEL takes oneDNN where it has a bf16 matmul and this
// CPU's bf16 dot products outrun its fp32 FMAs, else the native kernel on
// such a CPU, else the fallback.
TEST(Bf16Gemm, ChoiceFollowsTheEnvironmentAndTheCpu) {
  const char* env = std::getenv("REMAT_BF16_KERNEL");
  const std::string forced = env == nullptr ? "" : env;
  const bool dots = cpu_has_avx512_bf16();
  const bool fast_dots = dots && bf16_dot_speed() >= kMinBf16DotSpeed;
  const Bf16Gemm expected = forced == "fallback"                           ? Bf16Gemm::kFallback
                            : forced == "native"                           ? Bf16Gemm::kNative
                            : forced == "onednn"                           ? Bf16Gemm::kOnednn
                            : fast_dots && detail::onednn_bf16_available() ? Bf16Gemm::kOnednn
                            : fast_dots                                    ? Bf16Gemm::kNative
                                                                           : Bf16Gemm::kFallback;
  EXPECT_EQ(bf16_gemm(), expected) << to_string(bf16_gemm()) << ", dot speed " << bf16_dot_speed();
  EXPECT_EQ(bf16_gemm_chosen_by_speed(), forced.empty() && dots);
  if (!dots) {
    EXPECT_EQ(bf16_dot_speed(), 0.0);
  }
}

// The measured speed decides: a CPU whose bf16 dot products are slower than
// its fp32 FMAs (0.45x on an Intel Xeon without AMX) computes in fp32.
TEST(Bf16Gemm, DefaultTakesBf16OperandsOnlyWhereTheirDotProductsAreFaster) {
  EXPECT_EQ(default_bf16_gemm(true, true, 2.0), Bf16Gemm::kOnednn);
  EXPECT_EQ(default_bf16_gemm(true, false, 2.0), Bf16Gemm::kNative);
  EXPECT_EQ(default_bf16_gemm(true, true, kMinBf16DotSpeed), Bf16Gemm::kOnednn);
  EXPECT_EQ(default_bf16_gemm(true, true, 0.45), Bf16Gemm::kFallback);
  EXPECT_EQ(default_bf16_gemm(true, false, 0.45), Bf16Gemm::kFallback);
  EXPECT_EQ(default_bf16_gemm(false, false, 0.0), Bf16Gemm::kFallback);
  EXPECT_EQ(default_bf16_gemm(false, true, 2.0), Bf16Gemm::kFallback);
}

// oneDNN sizes its work split by the OpenMP thread count when it creates a
// primitive, and at a long k (a weight gradient's token count) splits k into
// partial sums whose order changes the bits; inside a team it runs a
// primitive on one thread. Each call is one sequential matmul: the product
// made at 16 threads outside a team (creating the primitive) is the one each
// thread of a team (a linear layer's row chunks) makes.
TEST(Bf16Gemm, OnednnBitsDoNotDependOnTheThreadCount) {
  if (!detail::onednn_bf16_available()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const int64_t m = 32, n = 32, k = 65536;
  const std::vector<bf16> a = random_bf16(k * m, 13), b = random_bf16(k * n, 14);
  auto product = [&](std::vector<float>& c) {
    c.assign(m * n, 0.0f);
    gemm_bf16_with(Bf16Gemm::kOnednn, true, false, m, n, k, a.data(), m, b.data(), n, 0.0f,
                   c.data(), n);
  };
  std::vector<float> alone, in_team[2];
  {
    ThreadsGuard guard(16);
    product(alone);
  }
  ThreadsGuard guard(2);
#pragma omp parallel num_threads(2)
  product(in_team[omp_get_thread_num()]);
  EXPECT_EQ(in_team[0], alone);
  EXPECT_EQ(in_team[1], alone);
}

// A fresh C (a parameter gradient's first writer) gets the bits of adding
// the product to zeros, whatever C held (here NaN), also where the sum is a
// tiny negative value: the native kernel flushes it to -0, which added to a
// zero C is +0 (so fresh is not beta 0 there).
TEST(Bf16Gemm, FreshWritesTheBitsOfAccumulatingIntoZeros) {
  const int64_t m = 3, n = 37, k = 600;  // two k-blocks, a partial panel
  std::vector<bf16> a = random_bf16(m * k, 4), b = random_bf16(k * n, 5);
  for (int64_t p = 0; p < k; ++p) {  // row 0 . column 0: k products of -2^-140
    a[p] = to_bf16(-0x1p-70f);
    b[p * n] = to_bf16(0x1p-70f);
  }
  for (Bf16Gemm gemm : available()) {
    PreparedB prepared;
    prepare_b(gemm, false, k, n, b.data(), n, prepared);
    std::vector<float> zeroed(m * n, 0.0f), fresh(m * n, std::numeric_limits<float>::quiet_NaN());
    gemm_bf16_prepared(false, m, a.data(), k, prepared, CWrite::kAccumulate, zeroed.data(), n);
    gemm_bf16_prepared(false, m, a.data(), k, prepared, CWrite::kFresh, fresh.data(), n);
    EXPECT_EQ(std::memcmp(zeroed.data(), fresh.data(), zeroed.size() * sizeof(float)), 0)
        << to_string(gemm);
  }
}

// The fresh write maps a -0 sum to +0 inside oneDNN's kernel (its linear
// post-op): k products of -2^-140 sum below fp32's smallest normal, which
// vdpbf16ps flushes to -0; overwriting keeps that -0, a fresh write may not.
// One call of an exact block shape, and one padded in M and K (3 x 100 run
// as 16 x 112).
TEST(Bf16Gemm, OnednnFreshTurnsANegativeZeroSumIntoPositiveZero) {
  if (!detail::onednn_bf16_available()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  // A as stored and transposed (a weight gradient's x^T: gemm:jit, not brgemm).
  for (const int64_t m : {16, -16, 3}) {
    const bool ta = m < 0;
    const int64_t rows = ta ? -m : m, n = 32, k = rows == 16 ? 512 : 100;
    std::vector<bf16> a = random_bf16(rows * k, 6), b = random_bf16(k * n, 7);
    for (int64_t p = 0; p < k; ++p) {
      a[ta ? p * rows : p] = to_bf16(-0x1p-70f);
      b[p * n] = to_bf16(0x1p-70f);
    }
    std::vector<float> over(rows * n, 1.0f);
    std::vector<float> fresh(rows * n, std::numeric_limits<float>::quiet_NaN());
    const int64_t lda = ta ? rows : k;
    detail::gemm_onednn(ta, false, rows, n, k, a.data(), lda, b.data(), n, CWrite::kOverwrite,
                        over.data(), n);
    detail::gemm_onednn(ta, false, rows, n, k, a.data(), lda, b.data(), n, CWrite::kFresh,
                        fresh.data(), n);
    // The exact shapes make the -0 (the padded one, run with zero products
    // in its k pairs, happens to give +0 already).
    if (rows == 16) {
      ASSERT_TRUE(over[0] == 0.0f && std::signbit(over[0])) << "m " << m << ": " << over[0];
    }
    EXPECT_TRUE(fresh[0] == 0.0f && !std::signbit(fresh[0])) << "m " << m << ": " << fresh[0];
    for (int64_t i = 1; i < rows * n; ++i) ASSERT_EQ(fresh[i], over[i]) << "m " << m << " i " << i;
  }
}

// However rows and k-values come (an MoE expert's count changes every step),
// oneDNN's primitives are a few block shapes per layout: a sweep of every
// row count up to 600 creates at most 14 (blocks of 16, .., 128, 192, .., 448
// and 512 rows), one of every k at most 20 (the same 14, and 16, .., 96 as a
// block added onto the first 512), and a second sweep none. One primitive
// per exact shape would make 600 each.
TEST(Bf16Gemm, OnednnPrimitivesAreFewWhateverTheShape) {
  if (!detail::onednn_bf16_available()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const int64_t most = 600, n = 48, fixed = 40;
  const std::vector<bf16> a = random_bf16(most * most, 8), b = random_bf16(most * n, 9);
  std::vector<float> c(most * n);
  auto sweep = [&](bool rows) {
    const int64_t before = detail::onednn_primitives_created();
    for (int64_t s = 1; s <= most; ++s) {
      const int64_t m = rows ? s : fixed, k = rows ? fixed : s;
      // A transposed, as a weight gradient's x^T whose k is the token count.
      detail::gemm_onednn(!rows, false, m, n, k, a.data(), rows ? k : m, b.data(), n,
                          CWrite::kOverwrite, c.data(), n);
    }
    return detail::onednn_primitives_created() - before;
  };
  for (const bool rows : {true, false}) {
    EXPECT_LE(sweep(rows), rows ? 14 : 20) << (rows ? "rows" : "k");
    EXPECT_EQ(sweep(rows), 0) << (rows ? "rows" : "k");
  }
}

// The linear layers split rows into chunks that depend on the shape only:
// 1 and 2 threads give the same bits, forward and backward.
TEST(Bf16Linear, BitIdenticalAcrossThreadCounts) {
  const int64_t m = 1000, k = 96, n = 80;
  const std::vector<bf16> x = random_bf16(m * k, 4), w = random_bf16(n * k, 5);
  const std::vector<bf16> dy = random_bf16(m * n, 6);
  auto run = [&](int threads, bool in_out) {
    ThreadsGuard guard(threads);
    std::vector<bf16> y(m * n);
    std::vector<float> dx(m * k, 0.5f), dw(n * k, 0.25f);
    linear_bf16_forward(x.data(), w.data(), in_out, m, k, n, y.data(), /*y_bf16=*/true);
    linear_bf16_backward(dy.data(), x.data(), w.data(), in_out, m, k, n, dx.data(), dw.data());
    std::vector<float> all(y.begin(), y.end());
    all.insert(all.end(), dx.begin(), dx.end());
    all.insert(all.end(), dw.begin(), dw.end());
    return all;
  };
  for (bool in_out : {false, true}) EXPECT_EQ(run(1, in_out), run(2, in_out)) << in_out;
}

// The forward's bf16 output is the fp32 result rounded once.
TEST(Bf16Linear, ForwardRoundsTheFp32ResultOnce) {
  const int64_t m = 300, k = 64, n = 48;
  const std::vector<bf16> x = random_bf16(m * k, 7), w = random_bf16(n * k, 8);
  std::vector<float> y32(m * n);
  std::vector<bf16> y16(m * n);
  linear_bf16_forward(x.data(), w.data(), false, m, k, n, y32.data(), false);
  linear_bf16_forward(x.data(), w.data(), false, m, k, n, y16.data(), true);
  for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(y16[i], to_bf16(y32[i])) << i;
}

// The fallback's linears on bf16 activations with fp32 weights and dy are
// the fp32 linears (kernels.h) on the widened activation, bit for bit: y (in
// fp32, or rounded once), a fresh dx overwritten and an accumulated dx; both
// weight layouts, at 1 and 3 threads. (dw sums x's rows in blocks: below.)
TEST(Bf16Linear, ActivationLinearsAreTheFp32OnesOnWidenedRows) {
  // n = 600: dw's rows in more than one chunk.
  const int64_t m = 700, k = 96;
  for (const int64_t n : {80, 600}) {
    const std::vector<bf16> x = random_bf16(m * k, 9);
    const std::vector<float> w = random_vector(n * k, 10), dy = random_vector(m * n, 11);
    std::vector<float> x32(m * k);
    widen_from_bf16(x.data(), m * k, x32.data());
    for (int threads : {1, 3}) {
      ThreadsGuard guard(threads);
      for (bool in_out : {false, true}) {
        for (uint32_t fresh : {0u, 1u}) {
          std::vector<float> y(m * n), dx(m * k, fresh ? NAN : 0.5f);
          std::vector<float> y_ref(m * n), dx_ref(m * k, 0.5f);
          std::vector<bf16> y16(m * n);
          linear_act_forward({x.data(), true}, w.data(), in_out, m, k, n, {y.data(), false});
          linear_act_forward({x.data(), true}, w.data(), in_out, m, k, n, {y16.data(), true});
          linear_act_backward(dy.data(), {x.data(), true}, w.data(), in_out, m, k, n, dx.data(),
                              nullptr, fresh);
          if (in_out) {
            linear_in_out_forward(x32.data(), w.data(), m, k, n, y_ref.data());
            linear_in_out_backward(dy.data(), x32.data(), w.data(), m, k, n, dx_ref.data(), nullptr,
                                   fresh);
          } else {
            linear_forward(x32.data(), w.data(), m, k, n, y_ref.data());
            linear_backward(dy.data(), x32.data(), w.data(), m, k, n, dx_ref.data(), nullptr,
                            fresh);
          }
          const std::string where = "n " + std::to_string(n) + " threads " +
                                    std::to_string(threads) + " in_out " + std::to_string(in_out) +
                                    " fresh " + std::to_string(fresh);
          EXPECT_EQ(bits(y), bits(y_ref)) << where;
          for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(y16[i], to_bf16(y_ref[i])) << where << i;
          EXPECT_EQ(bits(dx), bits(dx_ref)) << where;
        }
      }
    }
  }
}

// The fallback's dw from bf16 x (widened a block of rows at a time, chunked
// over dw's rows or, when it has too few, its columns) is the product summed
// in double to fp32 rounding; the same bits on 1, 2 and 3 threads (n 300
// is 3 chunks of dw's rows: one or two to a thread) and with dx computed
// alongside or not; a fresh dw has the bits of accumulating into zeros.
// Shapes: one block and two (m above 512), each way of chunking.
TEST(Bf16Linear, ActivationWeightGradientIsTheProductOnAnyThreadCount) {
  struct Shape {
    int64_t m, k, n;
  };
  for (const Shape s :
       {Shape{300, 96, 80}, Shape{700, 96, 80}, Shape{700, 300, 80}, Shape{1100, 96, 300}}) {
    const std::vector<bf16> x = random_bf16(s.m * s.k, 17);
    const std::vector<float> w = random_vector(s.n * s.k, 18), dy = random_vector(s.m * s.n, 19);
    for (bool in_out : {false, true}) {
      const std::string where = "m " + std::to_string(s.m) + " k " + std::to_string(s.k) + " n " +
                                std::to_string(s.n) + " in_out " + std::to_string(in_out);
      auto run = [&](int threads, uint32_t fresh, bool with_dx) {
        ThreadsGuard guard(threads);
        std::vector<float> dw(s.n * s.k, (fresh & 2) ? NAN : 0.0f), dx(s.m * s.k, 0.0f);
        linear_act_backward(dy.data(), {x.data(), true}, w.data(), in_out, s.m, s.k, s.n,
                            with_dx ? dx.data() : nullptr, dw.data(), fresh);
        return dw;
      };
      const std::vector<float> dw = run(1, 0, false);
      EXPECT_EQ(bits(run(2, 0, false)), bits(dw)) << where;
      EXPECT_EQ(bits(run(3, 0, false)), bits(dw)) << where;
      EXPECT_EQ(bits(run(3, 2, true)), bits(dw)) << where;
      EXPECT_EQ(bits(run(1, 3, true)), bits(dw)) << where;
      // dw[o, i] (weight [n, k]) or dw[i, o] (weight [k, n]) = sum_r dy[r, o] * x[r, i].
      for (int64_t o = 0; o < s.n; ++o) {
        for (int64_t i = 0; i < s.k; ++i) {
          double sum = 0.0, scale = 0.0;
          for (int64_t r = 0; r < s.m; ++r) {
            const double term = static_cast<double>(dy[r * s.n + o]) * from_bf16(x[r * s.k + i]);
            sum += term;
            scale += std::fabs(term);
          }
          const float got = in_out ? dw[i * s.n + o] : dw[o * s.k + i];
          ASSERT_NEAR(got, sum, 1e-5 * scale + 1e-30) << where << " o " << o << " i " << i;
        }
      }
    }
  }
}

// Grouped: each expert's segment is that linear (in, out) on its rows.
TEST(Bf16Linear, GroupedActivationLinearIsPerSegment) {
  const int64_t rows = 300, k = 40, n = 56, experts = 3;
  const std::vector<float> offsets = {0, 120, 120, 300};  // an empty expert too
  const std::vector<bf16> x = random_bf16(rows * k, 12);
  const std::vector<float> w = random_vector(experts * k * n, 13), dy = random_vector(rows * n, 14);
  std::vector<bf16> out(rows * n), out_ref(rows * n);
  std::vector<float> dx(rows * k, NAN), dw(experts * k * n, 0.5f);
  std::vector<float> dx_ref(rows * k, 0.0f), dw_ref(experts * k * n, 0.5f);
  grouped_linear_act_forward(x.data(), offsets.data(), w.data(), experts, k, n, out.data());
  grouped_linear_act_backward(dy.data(), x.data(), offsets.data(), w.data(), experts, k, n,
                              dx.data(), dw.data(), /*fresh=*/1);
  // The segments' GEMMs as the grouped linears run them (gemm_onednn.h's
  // DataDependentShapes: the rows' dimension left to run time).
  const detail::DataDependentShapes as_grouped;
  for (int64_t e = 0; e < experts; ++e) {
    const auto b = static_cast<int64_t>(offsets[e]), m = static_cast<int64_t>(offsets[e + 1]) - b;
    linear_act_forward({x.data() + b * k, true}, w.data() + e * k * n, true, m, k, n,
                       {out_ref.data() + b * n, true});
    linear_act_backward(dy.data() + b * n, {x.data() + b * k, true}, w.data() + e * k * n, true, m,
                        k, n, dx_ref.data() + b * k, dw_ref.data() + e * k * n, 0);
  }
  EXPECT_EQ(out, out_ref);
  EXPECT_EQ(dx, dx_ref);
  EXPECT_EQ(dw, dw_ref);
}

// Grouped bf16 linear (bf16 weights): a fresh drows and dw, NaN before, get
// the bits of accumulating into zeros, with an expert that has no rows.
TEST(Bf16Linear, GroupedBf16LinearOverwritesFreshGradients) {
  const int64_t rows = 300, k = 40, n = 56, experts = 3;
  const std::vector<float> offsets = {0, 120, 120, 300};
  const std::vector<bf16> x = random_bf16(rows * k, 15), w = random_bf16(experts * k * n, 16);
  const std::vector<bf16> dy = random_bf16(rows * n, 17);
  std::vector<float> dx_ref(rows * k, 0.0f), dw_ref(experts * k * n, 0.0f);
  grouped_linear_bf16_backward(dy.data(), x.data(), offsets.data(), w.data(), experts, k, n,
                               dx_ref.data(), dw_ref.data());
  for (int fresh = 1; fresh <= 3; ++fresh) {
    for (int threads : {1, 2}) {
      ThreadsGuard guard(threads);
      const bool fresh_dx = (fresh & 1) != 0, fresh_dw = (fresh & 2) != 0;
      std::vector<float> dx(rows * k, fresh_dx ? NAN : 0.0f);
      std::vector<float> dw(experts * k * n, fresh_dw ? NAN : 0.0f);
      grouped_linear_bf16_backward(dy.data(), x.data(), offsets.data(), w.data(), experts, k, n,
                                   dx.data(), dw.data(), fresh_dw, fresh_dx);
      EXPECT_EQ(dx, dx_ref) << fresh << " " << threads;
      EXPECT_EQ(dw, dw_ref) << fresh << " " << threads;
    }
  }
}

}  // namespace
}  // namespace remat::cpu
