// The pointwise ops on bf16 activations (kernels/cpu/bf16.h) give exactly
// the bits of the executor's fp32 staging: whole tensors widened, the fp32
// kernel run on them, its bf16 results rounded once; on 1 and 2 threads, at
// sizes that end in partial vectors and blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::bits;
using testing::in;
using testing::narrowed;
using testing::random_vector;
using testing::ThreadsGuard;
using testing::widened;

ActIn in(const std::vector<float>& x) { return {x.data(), false}; }
ActOut out(std::vector<bf16>& y) { return {y.data(), true}; }
ActOut out(std::vector<float>& y) { return {y.data(), false}; }

TEST(PointwiseBf16, RmsNormIsTheStagedFp32Kernel) {
  const int64_t rows = 300, dim = 136;  // dim: a scalar tail after 8-wide vectors
  const std::vector<bf16> x = narrowed(random_vector(rows * dim, 1));
  const std::vector<float> w = random_vector(dim, 2), dy = random_vector(rows * dim, 3);
  std::vector<float> y32(rows * dim), rstd32(rows), dx32(rows * dim, 0.5f), dw32(dim, 0.25f);
  rmsnorm_forward(widened(x).data(), w.data(), rows, dim, 1e-6f, y32.data(), rstd32.data());
  rmsnorm_backward(dy.data(), widened(x).data(), w.data(), rstd32.data(), rows, dim, dx32.data(),
                   dw32.data());
  for (int threads : {1, 2}) {
    ThreadsGuard guard(threads);
    std::vector<bf16> y(rows * dim);
    std::vector<float> rstd(rows), dx(rows * dim, 0.5f), dw(dim, 0.25f);
    rmsnorm_forward_act(in(x), w.data(), rows, dim, 1e-6f, out(y), rstd.data());
    rmsnorm_backward_act(dy.data(), in(x), w.data(), rstd.data(), rows, dim, dx.data(), dw.data());
    EXPECT_EQ(y, narrowed(y32)) << threads;
    EXPECT_EQ(bits(rstd), bits(rstd32)) << threads;
    EXPECT_EQ(bits(dx), bits(dx32)) << threads;
    EXPECT_EQ(bits(dw), bits(dw32)) << threads;
  }
}

TEST(PointwiseBf16, RopeIsTheStagedFp32Kernel) {
  // Heads of 16 (8-lane vectors only) and 12 (a scalar tail), bf16 and fp32
  // in and out; positions start at 7.
  const int64_t batch = 2, seq = 500, heads = 4, first = 7;
  for (const int64_t head_dim : {16, 12}) {
    const std::vector<bf16> x = narrowed(random_vector(batch * seq * heads * head_dim, 4));
    std::vector<float> y32(x.size());
    rope_forward_from(widened(x).data(), batch, seq, first, heads, head_dim, 10000.0, y32.data());
    for (int threads : {1, 2}) {
      ThreadsGuard guard(threads);
      std::vector<bf16> y(x.size());
      std::vector<float> y_wide(x.size());
      rope_forward_act(in(x), batch, seq, first, heads, head_dim, 10000.0, out(y));
      EXPECT_EQ(y, narrowed(y32)) << threads;
      rope_forward_act(in(x), batch, seq, first, heads, head_dim, 10000.0, out(y_wide));
      EXPECT_EQ(bits(y_wide), bits(y32)) << threads;
      const std::vector<float> x32 = widened(x);
      rope_forward_act(in(x32), batch, seq, first, heads, head_dim, 10000.0, out(y));
      EXPECT_EQ(y, narrowed(y32)) << threads;
    }
  }
}

TEST(PointwiseBf16, SwigluAndAddAreTheStagedFp32Kernels) {
  const int64_t n = 70001;  // several chunks, and a tail shorter than a vector
  const std::vector<bf16> a = narrowed(random_vector(n, 5)), b = narrowed(random_vector(n, 6));
  const std::vector<float> dy = random_vector(n, 7);
  std::vector<float> silu32(n), sum32(n), da32(n, 0.5f), db32(n, 0.25f);
  silu_mul_forward(widened(a).data(), widened(b).data(), n, silu32.data());
  silu_mul_backward(dy.data(), widened(a).data(), widened(b).data(), n, da32.data(), db32.data());
  add_forward(widened(a).data(), widened(b).data(), n, sum32.data());
  for (int threads : {1, 2}) {
    ThreadsGuard guard(threads);
    std::vector<bf16> silu(n), sum(n);
    std::vector<float> da(n, 0.5f), db(n, 0.25f);
    silu_mul_forward_act(in(a), in(b), n, out(silu));
    silu_mul_backward_act(dy.data(), in(a), in(b), n, da.data(), db.data());
    add_forward_act(in(a), in(b), n, out(sum));
    EXPECT_EQ(silu, narrowed(silu32)) << threads;
    EXPECT_EQ(bits(da), bits(da32)) << threads;
    EXPECT_EQ(bits(db), bits(db32)) << threads;
    EXPECT_EQ(sum, narrowed(sum32)) << threads;
  }
}

// Fresh gradients (kernels.h) are overwritten, whatever they held, with the
// bits of accumulating into zeros: the executor does not zero them first.
TEST(PointwiseBf16, SwigluBackwardOverwritesFreshGradients) {
  const int64_t n = 70001;
  const std::vector<bf16> a = narrowed(random_vector(n, 5)), b = narrowed(random_vector(n, 6));
  const std::vector<float> dy = random_vector(n, 7);
  std::vector<float> da32(n, 0.0f), db32(n, 0.0f);
  silu_mul_backward(dy.data(), widened(a).data(), widened(b).data(), n, da32.data(), db32.data());
  for (uint32_t fresh : {0b01u, 0b10u, 0b11u}) {
    for (int threads : {1, 2}) {
      ThreadsGuard guard(threads);
      std::vector<float> da(n, (fresh & 1) != 0 ? std::nanf("") : 0.0f);
      std::vector<float> db(n, (fresh & 2) != 0 ? std::nanf("") : 0.0f);
      silu_mul_backward_act(dy.data(), in(a), in(b), n, da.data(), db.data(), fresh);
      EXPECT_EQ(bits(da), bits(da32)) << fresh << " " << threads;
      EXPECT_EQ(bits(db), bits(db32)) << fresh << " " << threads;
    }
  }
}

// RMSNorm's fresh dx and dweight: NaN before, the bits of accumulating into
// zeros after, on any thread count.
TEST(PointwiseBf16, RmsNormBackwardOverwritesFreshGradients) {
  const int64_t rows = 300, dim = 136;
  const std::vector<bf16> x = narrowed(random_vector(rows * dim, 8));
  const std::vector<float> w = random_vector(dim, 9), dy = random_vector(rows * dim, 10);
  std::vector<float> rstd(rows), y32(rows * dim), dx32(rows * dim, 0.0f), dw32(dim, 0.0f);
  rmsnorm_forward(widened(x).data(), w.data(), rows, dim, 1e-6f, y32.data(), rstd.data());
  rmsnorm_backward(dy.data(), widened(x).data(), w.data(), rstd.data(), rows, dim, dx32.data(),
                   dw32.data());
  for (int fresh = 1; fresh <= 3; ++fresh) {
    for (int threads : {1, 2}) {
      ThreadsGuard guard(threads);
      const bool fresh_dx = (fresh & 1) != 0, fresh_dw = (fresh & 2) != 0;
      std::vector<float> dx(rows * dim, fresh_dx ? std::nanf("") : 0.0f);
      std::vector<float> dw(dim, fresh_dw ? std::nanf("") : 0.0f);
      rmsnorm_backward_act(dy.data(), in(x), w.data(), rstd.data(), rows, dim, dx.data(), dw.data(),
                           fresh_dw, fresh_dx);
      EXPECT_EQ(bits(dx), bits(dx32)) << fresh << " " << threads;
      EXPECT_EQ(bits(dw), bits(dw32)) << fresh << " " << threads;
    }
  }
}

// An operand the program keeps in fp32 is read, or written, as fp32.
TEST(PointwiseBf16, Fp32OperandsStayFp32) {
  const int64_t n = 40000;
  const std::vector<float> a = random_vector(n, 8);
  const std::vector<bf16> b = narrowed(random_vector(n, 9));
  std::vector<float> sum32(n), sum(n);
  add_forward(a.data(), widened(b).data(), n, sum32.data());
  add_forward_act(in(a), in(b), n, out(sum));
  EXPECT_EQ(bits(sum), bits(sum32));
}

}  // namespace
}  // namespace remat::cpu
