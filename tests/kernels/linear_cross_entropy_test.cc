// The fused output projection + cross-entropy (model.loss_chunk_rows)
// against the unfused pair it replaces: linear_forward, then
// cross_entropy_forward / cross_entropy_backward_inplace, then
// linear_backward, for chunk sizes that divide the rows, leave a ragged last
// chunk, are a single row, or exceed the rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::bit_identical;
using testing::max_abs_diff;
using testing::random_tokens;
using testing::random_vector;
using testing::ThreadsGuard;

struct Head {
  int64_t rows, dim, vocab;
  std::vector<float> x, w;
  std::vector<int32_t> targets;
  Head(int64_t r, int64_t d, int64_t v)
      : rows(r),
        dim(d),
        vocab(v),
        x(random_vector(r * d, 11)),
        w(random_vector(v * d, 12, 0.3f)),
        targets(random_tokens(r, static_cast<int32_t>(v), 13)) {}
};

struct Result {
  double loss = 0;
  std::vector<float> lse, dx, dw;
};

Result unfused(const Head& h) {
  Result r;
  std::vector<float> logits(h.rows * h.vocab);
  r.lse.resize(h.rows);
  linear_forward(h.x.data(), h.w.data(), h.rows, h.dim, h.vocab, logits.data());
  r.loss = cross_entropy_forward(logits.data(), h.targets.data(), h.rows, h.vocab, r.lse.data());
  cross_entropy_backward_inplace(logits.data(), h.targets.data(), r.lse.data(), h.rows, h.vocab,
                                 1.0f / static_cast<float>(h.rows));
  r.dx.assign(h.rows * h.dim, 0.0f);
  r.dw.assign(h.vocab * h.dim, 0.0f);
  linear_backward(logits.data(), h.x.data(), h.w.data(), h.rows, h.dim, h.vocab, r.dx.data(),
                  r.dw.data());
  return r;
}

// fresh: the gradients start as NaN and are overwritten; else they start at
// `start` and are added to.
Result fused(const Head& h, int64_t chunk, bool fresh, float start = 0.0f) {
  Result r;
  std::vector<float> scratch(linear_cross_entropy_scratch_floats(h.rows, h.vocab, chunk),
                             std::numeric_limits<float>::quiet_NaN());
  r.lse.resize(h.rows);
  r.loss = linear_cross_entropy_forward(fp32_loss_head(h.x.data(), h.w.data(), h.dim, h.vocab),
                                        h.targets.data(), h.rows, h.vocab, chunk, scratch.data(),
                                        r.lse.data());
  const float init = fresh ? std::numeric_limits<float>::quiet_NaN() : start;
  r.dx.assign(h.rows * h.dim, init);
  r.dw.assign(h.vocab * h.dim, init);
  linear_cross_entropy_backward(
      fp32_loss_head(h.x.data(), h.w.data(), h.dim, h.vocab, r.dx.data(), r.dw.data()),
      h.targets.data(), r.lse.data(), h.rows, h.vocab, chunk, scratch.data(), fresh ? 0b11u : 0u);
  return r;
}

TEST(LinearCrossEntropy, MatchesTheUnfusedPairForEveryChunking) {
  const Head h(37, 24, 53);
  const Result ref = unfused(h);
  for (int64_t chunk : {1, 5, 16, 37, 100}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Result r = fused(h, chunk, /*fresh=*/false);
    // Each row's logits come from a GEMM over its chunk rather than over
    // every row (OpenBLAS rounds a row by the row block it falls in), and the
    // loss sums the rows in one order across the chunks: the unfused values
    // to rounding. dx and dw: the same products, dw summed chunk by chunk.
    EXPECT_NEAR(r.loss, ref.loss, 1e-6 * std::abs(ref.loss));
    EXPECT_LT(max_abs_diff(r.lse, ref.lse), 1e-5);
    EXPECT_LT(max_abs_diff(r.dx, ref.dx), 1e-6);
    EXPECT_LT(max_abs_diff(r.dw, ref.dw), 1e-6);
    EXPECT_GT(max_abs_diff(r.dw, std::vector<float>(r.dw.size(), 0.0f)), 1e-3);
  }
}

TEST(LinearCrossEntropy, FreshGradientsGetTheBitsOfZeroedOnes) {
  const Head h(29, 16, 40);
  for (int64_t chunk : {7, 29}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const Result zeroed = fused(h, chunk, /*fresh=*/false);
    const Result fresh = fused(h, chunk, /*fresh=*/true);
    EXPECT_TRUE(bit_identical(zeroed.dx, fresh.dx));
    EXPECT_TRUE(bit_identical(zeroed.dw, fresh.dw));
  }
}

TEST(LinearCrossEntropy, AccumulatesIntoExistingGradients) {
  const Head h(20, 8, 30);
  const Result zeroed = fused(h, 6, /*fresh=*/false, 0.0f);
  const Result added = fused(h, 6, /*fresh=*/false, 0.5f);
  for (size_t i = 0; i < zeroed.dx.size(); ++i) EXPECT_NEAR(added.dx[i], zeroed.dx[i] + 0.5f, 1e-6);
  for (size_t i = 0; i < zeroed.dw.size(); ++i) EXPECT_NEAR(added.dw[i], zeroed.dw[i] + 0.5f, 1e-6);
}

TEST(LinearCrossEntropy, BitsDoNotDependOnTheThreadCount) {
  const Head h(300, 64, 257);
  Result one, two;
  {
    ThreadsGuard threads(1);
    one = fused(h, 128, true);
  }
  {
    ThreadsGuard threads(2);
    two = fused(h, 128, true);
  }
  EXPECT_EQ(one.loss, two.loss);
  EXPECT_TRUE(bit_identical(one.dx, two.dx));
  EXPECT_TRUE(bit_identical(one.dw, two.dw));
}

TEST(LinearCrossEntropy, RejectsAChunkBelowOne) {
  const Head h(4, 4, 4);
  std::vector<float> scratch(16), lse(4);
  EXPECT_THROW(linear_cross_entropy_forward(fp32_loss_head(h.x.data(), h.w.data(), 4, 4),
                                            h.targets.data(), 4, 4, 0, scratch.data(), lse.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace remat::cpu
