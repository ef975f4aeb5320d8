// The grouped GEMM runs every expert's row chunks in one parallel region; it
// must give exactly what one linear_in_out call per segment gives (kernels.h),
// for segments empty, single-row and longer than one chunk, accumulating or
// into a fresh gradient, at any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::bit_identical;
using testing::random_vector;
using testing::ThreadsGuard;

constexpr int64_t kExperts = 5, kK = 48, kN = 40;
// Segment sizes 300, 0, 1, 399, 200: the longer ones take several chunks, cut
// alike by both paths (128 rows; dense GEMMs cut coarser only past 512 rows).
const std::vector<float> kOffsets = {0, 300, 300, 301, 700, 900};
constexpr int64_t kRows = 900;

struct Grads {
  std::vector<float> drows, dw;
};

Grads per_segment_backward(const std::vector<float>& dout, const std::vector<float>& rows,
                           const std::vector<float>& w, uint32_t fresh) {
  Grads g{std::vector<float>(kRows * kK, fresh ? NAN : 0.5f),
          std::vector<float>(kExperts * kK * kN, 0.25f)};
  const detail::DataDependentShapes as_grouped;  // the grouped linears' GEMM blocks
  for (int64_t e = 0; e < kExperts; ++e) {
    const auto b = static_cast<int64_t>(kOffsets[e]), end = static_cast<int64_t>(kOffsets[e + 1]);
    linear_in_out_backward(dout.data() + b * kN, rows.data() + b * kK, w.data() + e * kK * kN,
                           end - b, kK, kN, g.drows.data() + b * kK, g.dw.data() + e * kK * kN,
                           fresh);
  }
  return g;
}

TEST(GroupedLinear, EqualsOneLinearPerSegmentBitForBit) {
  const auto rows = random_vector(kRows * kK, 1), w = random_vector(kExperts * kK * kN, 2, 0.1f),
             dout = random_vector(kRows * kN, 3);
  std::vector<float> expected(kRows * kN);
  // Segments cut into GEMM blocks as the grouped linears cut them (oneDNN,
  // gemm_onednn.h's DataDependentShapes); OpenBLAS ignores the scope.
  auto as_grouped = std::make_unique<detail::DataDependentShapes>();
  for (int64_t e = 0; e < kExperts; ++e) {
    const auto b = static_cast<int64_t>(kOffsets[e]), end = static_cast<int64_t>(kOffsets[e + 1]);
    linear_in_out_forward(rows.data() + b * kK, w.data() + e * kK * kN, end - b, kK, kN,
                          expected.data() + b * kN);
  }
  as_grouped.reset();  // the grouped linears open their own
  for (int threads : {1, 2, 3}) {
    ThreadsGuard guard(threads);
    std::vector<float> out(kRows * kN, NAN);
    grouped_linear_forward(rows.data(), kOffsets.data(), w.data(), kExperts, kRows, kK, kN,
                           out.data());
    EXPECT_TRUE(bit_identical(out, expected)) << "forward at " << threads << " threads";
    for (uint32_t fresh : {0u, 1u}) {
      const Grads want = per_segment_backward(dout, rows, w, fresh);
      Grads got{std::vector<float>(kRows * kK, fresh ? NAN : 0.5f),
                std::vector<float>(kExperts * kK * kN, 0.25f)};
      grouped_linear_backward(dout.data(), rows.data(), kOffsets.data(), w.data(), kExperts, kRows,
                              kK, kN, got.drows.data(), got.dw.data(), fresh);
      EXPECT_TRUE(bit_identical(got.drows, want.drows))
          << "drows at " << threads << " threads, fresh " << fresh;
      EXPECT_TRUE(bit_identical(got.dw, want.dw))
          << "dw at " << threads << " threads, fresh " << fresh;
    }
  }
}

// A dying rows becomes its own gradient (op.cc's grads_over_saved_inputs):
// dw must read every row of a segment before drows overwrites it, at any
// thread count, and give the bits of separate buffers.
TEST(GroupedLinear, FreshRowGradientsOverTheRowsHaveTheBitsOfSeparateOnes) {
  const auto rows = random_vector(kRows * kK, 4), w = random_vector(kExperts * kK * kN, 5, 0.1f),
             dout = random_vector(kRows * kN, 6);
  for (int threads : {1, 2, 3}) {
    ThreadsGuard guard(threads);
    Grads separate{std::vector<float>(kRows * kK, NAN), std::vector<float>(kExperts * kK * kN)};
    grouped_linear_backward(dout.data(), rows.data(), kOffsets.data(), w.data(), kExperts, kRows,
                            kK, kN, separate.drows.data(), separate.dw.data(), 0b11);
    std::vector<float> shared = rows, dw(kExperts * kK * kN);
    grouped_linear_backward(dout.data(), shared.data(), kOffsets.data(), w.data(), kExperts, kRows,
                            kK, kN, shared.data(), dw.data(), 0b11);
    EXPECT_TRUE(bit_identical(shared, separate.drows)) << "drows at " << threads << " threads";
    EXPECT_TRUE(bit_identical(dw, separate.dw)) << "dw at " << threads << " threads";
  }
}

}  // namespace
}  // namespace remat::cpu
