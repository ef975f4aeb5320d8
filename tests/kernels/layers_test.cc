// Linear, RMSNorm, embedding and RoPE: forward against direct formulas,
// backward against finite differences, accumulation and determinism.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::bits;
using testing::check_gradient;
using testing::random_tokens;
using testing::random_vector;
using testing::ThreadsGuard;
using testing::weighted_sum;

// ---------------------------------------------------------------- linear

TEST(Linear, ForwardMatchesNaive) {
  const int64_t m = 7, k = 13, n = 5;
  auto x = random_vector(m * k, 1), w = random_vector(n * k, 2);
  std::vector<float> y(m * n, 123.0f);
  linear_forward(x.data(), w.data(), m, k, n, y.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t c = 0; c < k; ++c) s += double(x[i * k + c]) * w[j * k + c];
      EXPECT_NEAR(y[i * n + j], s, 1e-5);
    }
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  ThreadsGuard one(1);
  const int64_t m = 6, k = 9, n = 7;
  auto x = random_vector(m * k, 3), w = random_vector(n * k, 4), r = random_vector(m * n, 5);
  std::vector<float> dx(m * k, 0.0f), dw(n * k, 0.0f), y(m * n);
  linear_backward(r.data(), x.data(), w.data(), m, k, n, dx.data(), dw.data());
  auto loss = [&] {
    linear_forward(x.data(), w.data(), m, k, n, y.data());
    return weighted_sum(y, r);
  };
  check_gradient("linear dx", x, dx, loss, 1e-2f, 1e-3);
  check_gradient("linear dw", w, dw, loss, 1e-2f, 1e-3);
}

TEST(Linear, BackwardAccumulates) {
  const int64_t m = 33, k = 17, n = 20;
  auto x = random_vector(m * k, 6), w = random_vector(n * k, 7), dy = random_vector(m * n, 8);
  std::vector<float> dx1(m * k, 0.0f), dw1(n * k, 0.0f);
  linear_backward(dy.data(), x.data(), w.data(), m, k, n, dx1.data(), dw1.data());
  auto dx2 = dx1, dw2 = dw1;
  linear_backward(dy.data(), x.data(), w.data(), m, k, n, dx2.data(), dw2.data());
  for (size_t i = 0; i < dx1.size(); ++i) EXPECT_EQ(dx2[i], 2.0f * dx1[i]);
  for (size_t i = 0; i < dw1.size(); ++i) EXPECT_EQ(dw2[i], 2.0f * dw1[i]);
}

// ---------------------------------------------------------------- rmsnorm

TEST(RmsNorm, ForwardMatchesFormula) {
  const int64_t rows = 5, dim = 37;
  const float eps = 1e-5f;
  auto x = random_vector(rows * dim, 10), w = random_vector(dim, 11);
  std::vector<float> y(rows * dim), rstd(rows);
  rmsnorm_forward(x.data(), w.data(), rows, dim, eps, y.data(), rstd.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j) ss += double(x[r * dim + j]) * x[r * dim + j];
    const double rs = 1.0 / std::sqrt(ss / dim + eps);
    EXPECT_NEAR(rstd[r], rs, 1e-6 * rs);
    for (int64_t j = 0; j < dim; ++j) EXPECT_NEAR(y[r * dim + j], x[r * dim + j] * rs * w[j], 1e-5);
  }
}

TEST(RmsNorm, GradientsMatchFiniteDifferences) {
  ThreadsGuard one(1);
  const int64_t rows = 6, dim = 21;
  const float eps = 1e-5f;
  auto x = random_vector(rows * dim, 12), w = random_vector(dim, 13, 0.5f);
  for (float& v : w) v += 1.0f;
  auto r = random_vector(rows * dim, 14);
  std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim, 0.0f), dw(dim, 0.0f);
  rmsnorm_forward(x.data(), w.data(), rows, dim, eps, y.data(), rstd.data());
  rmsnorm_backward(r.data(), x.data(), w.data(), rstd.data(), rows, dim, dx.data(), dw.data());
  std::vector<float> rs2(rows);
  auto loss = [&] {
    rmsnorm_forward(x.data(), w.data(), rows, dim, eps, y.data(), rs2.data());
    return weighted_sum(y, r);
  };
  check_gradient("rmsnorm dx", x, dx, loss, 1e-2f, 2e-3);
  check_gradient("rmsnorm dweight", w, dw, loss, 1e-2f, 2e-3);
}

TEST(RmsNorm, BackwardAccumulatesAndIsDeterministic) {
  const int64_t rows = 300, dim = 200;  // large enough to run in parallel
  auto x = random_vector(rows * dim, 15), w = random_vector(dim, 16),
       g = random_vector(rows * dim, 17);
  std::vector<float> y(rows * dim), rstd(rows);
  rmsnorm_forward(x.data(), w.data(), rows, dim, 1e-5f, y.data(), rstd.data());
  auto run = [&](int threads) {
    ThreadsGuard t(threads);
    std::vector<float> dx(rows * dim, 0.0f), dw(dim, 0.0f);
    rmsnorm_backward(g.data(), x.data(), w.data(), rstd.data(), rows, dim, dx.data(), dw.data());
    return std::make_pair(dx, dw);
  };
  auto a = run(2), b = run(2), c = run(1);
  EXPECT_TRUE(testing::bit_identical(a.first, b.first));
  EXPECT_TRUE(testing::bit_identical(a.second, b.second));
  EXPECT_TRUE(testing::bit_identical(a.first, c.first));
  EXPECT_TRUE(testing::bit_identical(a.second, c.second));
  auto dx = a.first, dw = a.second;
  rmsnorm_backward(g.data(), x.data(), w.data(), rstd.data(), rows, dim, dx.data(), dw.data());
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], 2.0f * a.first[i]);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_EQ(dw[i], 2.0f * a.second[i]);
}

// ---------------------------------------------------------------- embedding

TEST(Embedding, ForwardGathersRows) {
  const int64_t vocab = 11, dim = 6;
  auto table = random_vector(vocab * dim, 20);
  std::vector<int32_t> tokens = {3, 0, 10, 3, 7};
  std::vector<float> out(tokens.size() * dim);
  embedding_forward(tokens.data(), tokens.size(), table.data(), dim, out.data());
  for (size_t t = 0; t < tokens.size(); ++t)
    for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(out[t * dim + j], table[tokens[t] * dim + j]);
}

TEST(Embedding, GradientMatchesFiniteDifferencesWithRepeatedTokens) {
  ThreadsGuard one(1);
  const int64_t vocab = 9, dim = 10;
  auto table = random_vector(vocab * dim, 21);
  std::vector<int32_t> tokens = {2, 5, 2, 8, 2, 0, 5};  // repeats; some rows unused
  const int64_t n = tokens.size();
  auto r = random_vector(n * dim, 22);
  std::vector<float> dtable(vocab * dim, 0.0f), out(n * dim);
  embedding_backward(tokens.data(), n, r.data(), dim, vocab, dtable.data());
  auto loss = [&] {
    embedding_forward(tokens.data(), n, table.data(), dim, out.data());
    return weighted_sum(out, r);
  };
  check_gradient("embedding dtable", table, dtable, loss, 1e-2f, 1e-3);
  for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(dtable[1 * dim + j], 0.0f);  // unused token
}

TEST(Embedding, BackwardAccumulatesAndIsDeterministic) {
  const int64_t vocab = 50, dim = 300, n = 2000;
  auto tokens = random_tokens(n, vocab, 23);
  auto g = random_vector(n * dim, 24);
  auto run = [&](int threads) {
    ThreadsGuard t(threads);
    std::vector<float> d(vocab * dim, 0.0f);
    embedding_backward(tokens.data(), n, g.data(), dim, vocab, d.data());
    return d;
  };
  auto a = run(2), b = run(2), c = run(1);
  EXPECT_TRUE(testing::bit_identical(a, b));
  EXPECT_TRUE(testing::bit_identical(a, c));
  // Repeated tokens add into dtable one by one, so doubling holds up to rounding.
  auto d = a;
  embedding_backward(tokens.data(), n, g.data(), dim, vocab, d.data());
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_NEAR(d[i], 2.0f * a[i], 1e-5 * (1.0 + std::fabs(a[i])));
}

// A fresh backward into a table whose rows are pages, on 2 threads: rows no
// token reads hold +0.0f (read-only pages, so writing one kills the
// process), NaN, -0.0f or a stray value. True when it wrote no read-only
// row and the table holds the bits of accumulating into a zeroed one.
bool fresh_backward_spares_zero_rows() {
  ThreadsGuard two(2);
  const int64_t page = sysconf(_SC_PAGESIZE), dim = page / int64_t{sizeof(float)}, vocab = 40;
  void* pages = mmap(nullptr, static_cast<size_t>(vocab * page), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) return false;
  float* table = static_cast<float*>(pages);  // zero-filled
  table[2 * dim + 5] = std::nanf("");
  table[5 * dim] = -0.0f;
  table[6 * dim + dim - 1] = 1.0f;
  table[4 * dim + 3] = 7.0f;  // a row tokens read: overwritten
  std::vector<int32_t> tokens = {1, 4, 1, 17};
  for (int64_t row = 0; row < vocab; ++row) {
    const bool zero = row != 2 && row != 5 && row != 6 && row != 1 && row != 4 && row != 17;
    if (zero && mprotect(table + row * dim, static_cast<size_t>(page), PROT_READ) != 0)
      return false;
  }
  const int64_t n = tokens.size();
  const auto g = random_vector(n * dim, 25);
  std::vector<float> want(vocab * dim, 0.0f);
  embedding_backward(tokens.data(), n, g.data(), dim, vocab, want.data());
  embedding_backward(tokens.data(), n, g.data(), dim, vocab, table, /*fresh=*/1);
  return std::memcmp(table, want.data(), want.size() * sizeof(float)) == 0;
}

// The table persists across steps and a batch reads few of its rows: a row
// that is zero already is not rewritten every step. In a child process
// started afresh (threadsafe style), as a write to a read-only page kills it.
TEST(EmbeddingDeathTest, FreshBackwardWritesNoRowThatIsZeroAlready) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(fresh_backward_spares_zero_rows() ? 0 : 1), ::testing::ExitedWithCode(0),
              "");
}

// (The forward pass is not given the vocabulary size; its caller validates.)
TEST(Embedding, BackwardRejectsOutOfRangeTokens) {
  std::vector<float> table(4 * 2), out(2 * 2);
  std::vector<int32_t> tokens = {1, 4};
  EXPECT_THROW(embedding_backward(tokens.data(), 2, out.data(), 2, 4, table.data()),
               std::out_of_range);
}

// ---------------------------------------------------------------- rope

TEST(Rope, ForwardMatchesDirectFormula) {
  const int64_t batch = 2, seq = 9, heads = 3, hd = 8;
  const double theta = 500000.0;
  auto x = random_vector(batch * seq * heads * hd, 30);
  std::vector<float> y(x.size());
  rope_forward(x.data(), batch, seq, heads, hd, theta, y.data());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t p = 0; p < seq; ++p)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const int64_t o = ((b * seq + p) * heads + h) * hd + 2 * i;
          const double angle = p * std::pow(theta, -2.0 * i / hd);
          const double c = std::cos(angle), s = std::sin(angle);
          EXPECT_NEAR(y[o], x[o] * c - x[o + 1] * s, 1e-6);
          EXPECT_NEAR(y[o + 1], x[o] * s + x[o + 1] * c, 1e-6);
        }
  // Position 0 is the identity.
  for (int64_t j = 0; j < heads * hd; ++j) EXPECT_EQ(y[j], x[j]);
}

// The kernel rotates 4 pairs per 8-lane vector and the rest of a head one
// pair at a time; both give the bits of the scalar formula, forward and
// backward (the rotation by -angle, added, or written into a fresh dx as
// adding to zeros would). Head widths: vectors only, a tail only, both.
TEST(Rope, VectorAndTailAreTheScalarFormulaBitForBit) {
  const int64_t batch = 2, seq = 5, heads = 3, first = 3;
  const double theta = 10000.0;
  for (const int64_t hd : {4, 8, 12, 22, 64}) {
    const auto x = random_vector(batch * seq * heads * hd, 33);
    const auto acc = random_vector(x.size(), 34);
    std::vector<float> y(x.size()), want(x.size()), dx = acc, dx_want = acc;
    std::vector<float> fresh(x.size(), NAN), fresh_want(x.size());
    rope_forward_from(x.data(), batch, seq, first, heads, hd, theta, y.data());
    rope_backward(x.data(), batch, seq, heads, hd, theta, dx.data());
    rope_backward(x.data(), batch, seq, heads, hd, theta, fresh.data(), /*fresh=*/1);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t p = 0; p < seq; ++p)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double freq =
              std::pow(theta, -static_cast<double>(2 * i) / static_cast<double>(hd));
          const auto rotate = [&](int64_t position, float sign, int64_t o, float* out, bool add) {
            const double angle = static_cast<double>(position) * freq;
            const float c = static_cast<float>(std::cos(angle));
            const float s = sign * static_cast<float>(std::sin(angle));
            const float y0 = std::fma(x[o], c, -(x[o + 1] * s));
            const float y1 = std::fma(x[o], s, x[o + 1] * c);
            out[o] = add ? out[o] + y0 : y0;
            out[o + 1] = add ? out[o + 1] + y1 : y1;
          };
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t o = ((b * seq + p) * heads + h) * hd + 2 * i;
            rotate(first + p, 1.0f, o, want.data(), false);
            rotate(p, -1.0f, o, dx_want.data(), true);
            fresh_want[o] = 0.0f;
            fresh_want[o + 1] = 0.0f;
            rotate(p, -1.0f, o, fresh_want.data(), true);
          }
        }
    EXPECT_EQ(bits(y), bits(want)) << "head_dim " << hd;
    EXPECT_EQ(bits(dx), bits(dx_want)) << "head_dim " << hd;
    EXPECT_EQ(bits(fresh), bits(fresh_want)) << "head_dim " << hd;
  }
}

TEST(Rope, GradientMatchesFiniteDifferences) {
  ThreadsGuard one(1);
  const int64_t batch = 2, seq = 7, heads = 2, hd = 6;
  const double theta = 10.0;  // large angles, so a sign error cannot hide
  auto x = random_vector(batch * seq * heads * hd, 31), r = random_vector(x.size(), 32);
  std::vector<float> dx(x.size(), 0.0f), y(x.size());
  rope_backward(r.data(), batch, seq, heads, hd, theta, dx.data());
  auto loss = [&] {
    rope_forward(x.data(), batch, seq, heads, hd, theta, y.data());
    return weighted_sum(y, r);
  };
  check_gradient("rope dx", x, dx, loss, 1e-2f, 1e-3);
  auto dx2 = dx;
  rope_backward(r.data(), batch, seq, heads, hd, theta, dx2.data());
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx2[i], 2.0f * dx[i]);
}

}  // namespace
}  // namespace remat::cpu
