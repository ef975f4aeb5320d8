// The fp32 GEMM (kernels/cpu/gemm_fp32.h) on both implementations: OpenBLAS
// everywhere, oneDNN's f32 matmul where it has more than its reference one
// (skipped elsewhere, saying why). Against an fp64 reference in every
// layout and write; fresh writes give the bits of accumulating into zeros,
// from NaN, also where the kernel's own sum is -0; oneDNN runs one
// implementation for every write of a shape (so fresh and accumulated
// gradients sum in one order); the choice follows REMAT_FP32_GEMM.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::random_vector;

std::vector<Fp32Gemm> available() {
  std::vector<Fp32Gemm> g{Fp32Gemm::kOpenblas};
  if (detail::onednn_f32_available()) g.push_back(Fp32Gemm::kOnednn);
  return g;
}

const CWrite kWrites[] = {CWrite::kOverwrite, CWrite::kAccumulate, CWrite::kFresh};

std::string where(Fp32Gemm gemm, int64_t m, int64_t n, int64_t k, bool ta, bool tb, CWrite w) {
  return std::string(to_string(gemm)) + " m " + std::to_string(m) + " n " + std::to_string(n) +
         " k " + std::to_string(k) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) +
         " write " + std::to_string(static_cast<int>(w));
}

// op(X)[i, p] of a row-major X stored [rows, cols] or, transposed, [cols, rows].
float at(const std::vector<float>& x, bool trans, int64_t ld, int64_t i, int64_t p) {
  return trans ? x[p * ld + i] : x[i * ld + p];
}

// Each element within (k + 1) * 2^-24 * (|C| + sum |a b|) of the fp64 sum
// (recursive summation, first order); a wrong index or a lost block errs by
// O(1). A fresh or overwritten C starts as NaN.
// Each shape runs cut into blocks and, under DataDependentShapes, with the
// rows' dimension left to run time.
TEST(Fp32Gemm, MatchesFp64ReferenceInEveryLayoutAndWrite) {
  const int64_t shapes[][3] = {{1, 1, 1},     {13, 33, 7},    {40, 70, 513},
                               {97, 31, 300}, {20, 40, 1100}, {300, 24, 130}};
  for (Fp32Gemm gemm : available()) {
    for (const auto& s : shapes) {
      for (const bool rows_at_run_time : {false, true}) {
        std::optional<detail::DataDependentShapes> expert_rows;
        if (rows_at_run_time) expert_rows.emplace();
        const int64_t m = s[0], n = s[1], k = s[2];
        const std::vector<float> a = random_vector(m * k, 1), b = random_vector(k * n, 2);
        for (int layout = 0; layout < 4; ++layout) {
          const bool ta = layout & 1, tb = layout & 2;
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          for (CWrite write : kWrites) {
            const std::vector<float> c0 = random_vector(m * n, 3);
            std::vector<float> c =
                write == CWrite::kAccumulate ? c0 : std::vector<float>(m * n, std::nanf(""));
            gemm_fp32_with(gemm, ta, tb, m, n, k, a.data(), lda, b.data(), ldb, write, c.data(), n);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) {
                double sum = write == CWrite::kAccumulate ? c0[i * n + j] : 0.0,
                       mag = std::abs(sum);
                for (int64_t p = 0; p < k; ++p) {
                  const double prod = double(at(a, ta, lda, i, p)) * at(b, tb, ldb, p, j);
                  sum += prod;
                  mag += std::abs(prod);
                }
                ASSERT_NEAR(c[i * n + j], sum, (k + 1) * 0x1p-24 * mag + 1e-30)
                    << where(gemm, m, n, k, ta, tb, write) << " rows at run time "
                    << rows_at_run_time;
              }
            }
          }
        }
      }
    }
  }
}

// Shapes the engine runs (a 512-row chunk of a dense linear; a 128-row
// chunk of dw with k = 2048 tokens; a short MoE segment chunk) and small odd
// ones, in every layout. Column 0 of row 0 sums k products of -2^-140, a
// sum a kernel that flushes denormals leaves at -0 (which 0 + -0 makes +0);
// row 1 of A is zeros against a negative column of B: products of -0.
TEST(Fp32Gemm, FreshWritesTheBitsOfAccumulatingIntoZeros) {
  const int64_t shapes[][3] = {{512, 256, 256}, {128, 256, 2048}, {44, 512, 256}, {3, 37, 600}};
  for (Fp32Gemm gemm : available()) {
    for (const auto& s : shapes) {
      for (const bool rows_at_run_time : {false, true}) {  // DataDependentShapes
        std::optional<detail::DataDependentShapes> expert_rows;
        if (rows_at_run_time) expert_rows.emplace();
        const int64_t m = s[0], n = s[1], k = s[2];
        for (int layout = 0; layout < 4; ++layout) {
          const bool ta = layout & 1, tb = layout & 2;
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          std::vector<float> a = random_vector(m * k, 4), b = random_vector(k * n, 5);
          for (int64_t p = 0; p < k; ++p) {
            a[ta ? p * lda : p] = -0x1p-70f;        // A[0, p]
            a[ta ? p * lda + 1 : lda + p] = 0.0f;   // A[1, p]
            b[tb ? p : p * ldb] = 0x1p-70f;         // B[p, 0]
            b[tb ? ldb + p : p * ldb + 1] = -1.0f;  // B[p, 1]
          }
          std::vector<float> zeroed(m * n, 0.0f), fresh(m * n, std::nanf(""));
          gemm_fp32_with(gemm, ta, tb, m, n, k, a.data(), lda, b.data(), ldb, CWrite::kAccumulate,
                         zeroed.data(), n);
          gemm_fp32_with(gemm, ta, tb, m, n, k, a.data(), lda, b.data(), ldb, CWrite::kFresh,
                         fresh.data(), n);
          EXPECT_EQ(std::memcmp(zeroed.data(), fresh.data(), zeroed.size() * sizeof(float)), 0)
              << where(gemm, m, n, k, ta, tb, CWrite::kFresh) << " rows at run time "
              << rows_at_run_time;
          EXPECT_FALSE(std::signbit(fresh[n + 1])) << where(gemm, m, n, k, ta, tb, CWrite::kFresh)
                                                   << " rows at run time " << rows_at_run_time;
        }
      }
    }
  }
}

// Fresh and accumulated writes of one gradient must sum k in one order:
// oneDNN picks its implementation per primitive, post-ops included, so each
// write of the engine's shapes must get the same, and not the reference one.
TEST(Fp32Gemm, OnednnRunsOneImplementationForEveryWrite) {
  if (!detail::onednn_f32_available()) GTEST_SKIP() << "no oneDNN f32 matmul beyond ref here";
  const int64_t shapes[][3] = {{512, 256, 256}, {128, 256, 2048}, {512, 2816, 1024}, {44, 8, 256}};
  for (const auto& s : shapes) {
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const int64_t m = s[0], n = s[1], k = s[2];
      const std::string overwrite = detail::onednn_f32_implementation(
          ta, tb, m, n, k, ta ? m : k, tb ? k : n, CWrite::kOverwrite, n);
      EXPECT_NE(overwrite.rfind("ref", 0), 0u) << overwrite;
      for (CWrite write : {CWrite::kAccumulate, CWrite::kFresh}) {
        EXPECT_EQ(
            detail::onednn_f32_implementation(ta, tb, m, n, k, ta ? m : k, tb ? k : n, write, n),
            overwrite)
            << where(Fp32Gemm::kOnednn, m, n, k, ta, tb, write);
      }
    }
  }
}

// Under DataDependentShapes (an MoE expert's rows, a new count every step)
// the dimension over the rows is left to run time: M where A is the rows,
// K where A is read transposed (the weight gradient); where B is read
// transposed (drows), whole 128-row blocks keep a fixed shape. A sweep of
// every row count up to 600 then creates at most one primitive per layout
// and write (two where B is transposed; none if an earlier test made
// them), a second sweep none, and the run-time primitive is the same
// implementation for every write, not the reference one. Cut into blocks
// and padded, as before, the first sweep made five per layout and write.
TEST(Fp32Gemm, DataDependentCallsTakeOnePrimitivePerLayout) {
  if (!detail::onednn_f32_available()) GTEST_SKIP() << "no oneDNN f32 matmul beyond ref here";
  const int64_t most = 600, model = 512, n = 64;
  const std::vector<float> a = random_vector(most * model, 21), b = random_vector(most * n, 22);
  std::vector<float> c(most * n);
  const detail::DataDependentShapes expert_rows;
  enum Layout { kRowsAsM, kRowsAsMTransposedB, kRowsAsK };
  auto sweep = [&](Layout layout, CWrite write) {
    const int64_t before = detail::onednn_primitives_created();
    for (int64_t s = 1; s <= most; ++s) {
      if (layout == kRowsAsM) {  // out[s, n] = rows[s, 512] @ w[512, n]
        detail::gemm_onednn_f32(false, false, s, n, model, a.data(), model, b.data(), n, write,
                                c.data(), n);
      } else if (layout == kRowsAsMTransposedB) {  // drows[s, n] = dout[s, 512] @ w[n, 512]^T
        detail::gemm_onednn_f32(false, true, s, n, model, a.data(), model, b.data(), model, write,
                                c.data(), n);
      } else {  // dw[128, n] = rows[s, 128]^T @ dout[s, n]
        detail::gemm_onednn_f32(true, false, 128, n, s, a.data(), 128, b.data(), n, write, c.data(),
                                n);
      }
    }
    return detail::onednn_primitives_created() - before;
  };
  for (const Layout layout : {kRowsAsM, kRowsAsMTransposedB, kRowsAsK}) {
    const std::string what = "layout " + std::to_string(layout);
    const bool ta = layout == kRowsAsK, tb = layout == kRowsAsMTransposedB;
    for (CWrite write : kWrites) {
      EXPECT_LE(sweep(layout, write), tb ? 2 : 1) << what;
      EXPECT_EQ(sweep(layout, write), 0) << what;
    }
    const int64_t lda = ta ? 128 : model, ldb = tb ? model : n;
    const std::string overwrite =
        detail::onednn_f32_implementation(ta, tb, 300, n, 300, lda, ldb, CWrite::kOverwrite, n);
    EXPECT_NE(overwrite.rfind("ref", 0), 0u) << what << ": " << overwrite;
    for (CWrite write : {CWrite::kAccumulate, CWrite::kFresh}) {
      EXPECT_EQ(detail::onednn_f32_implementation(ta, tb, 300, n, 300, lda, ldb, write, n),
                overwrite)
          << what;
    }
  }
}

// K blocks where A is read along k: never deeper than 512, so a deep
// product (the output head's dx, k = vocabulary) streams B from L2; short
// and ragged depths are cut as next_block cuts them.
TEST(Fp32Gemm, DepthBlocksAreAtMost512) {
  auto cut = [](int64_t k) {
    std::vector<int64_t> sizes;
    for (int64_t rest = k; rest > 0;) {
      const detail::Block b = detail::next_depth_block(rest);
      sizes.push_back(b.size);
      rest -= b.size;
    }
    return sizes;
  };
  EXPECT_EQ(cut(2048), (std::vector<int64_t>{512, 512, 512, 512}));
  EXPECT_EQ(cut(2816), (std::vector<int64_t>{512, 512, 512, 512, 512, 256}));
  EXPECT_EQ(cut(1100), (std::vector<int64_t>{512, 512, 76}));
  EXPECT_EQ(cut(768), (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(cut(300), (std::vector<int64_t>{256, 44}));
  EXPECT_EQ(detail::next_block(2048).size, 2048);  // unchanged elsewhere
}

// The eltwise linear post-op (1 * x + 0) really turns -0 into +0 inside
// oneDNN's matmul kernel: an output scale of -1 makes the kernel's +0 sum
// -0, which the plain matmul stores and the post-op does not.
TEST(Fp32Gemm, OnednnIdentityPostOpTurnsNegativeZeroPositive) {
  if (!detail::onednn_f32_available()) GTEST_SKIP() << "no oneDNN f32 matmul beyond ref here";
  using dnnl::memory;
  const int64_t m = 64, n = 64, k = 64;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a_md({m, k}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc b_md({k, n}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
  std::vector<float> a(m * k, 0.0f), b = random_vector(k * n, 6);
  auto product = [&](bool post_op) {
    dnnl::primitive_attr attr;
    attr.set_output_scales(0, {-1.0f});
    if (post_op) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    EXPECT_EQ(pd.impl_info_str(),
              detail::onednn_f32_implementation(false, false, m, n, k, k, n, CWrite::kFresh, n));
    std::vector<float> c(m * n, std::nanf(""));
    memory am(a_md, engine, a.data()), bm(b_md, engine, b.data()), cm(c_md, engine, c.data());
    dnnl::matmul(pd).execute(stream,
                             {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
    return c;
  };
  const std::vector<float> plain = product(false), identity = product(true);
  for (int64_t i = 0; i < m * n; ++i) {
    ASSERT_TRUE(plain[i] == 0.0f && std::signbit(plain[i])) << i;  // the set-up makes -0
    ASSERT_TRUE(identity[i] == 0.0f && !std::signbit(identity[i])) << i;
  }
}

// The MFU denominator is the peak of the widest FMA the CPU runs: no GEMM
// may beat it. Measuring only 8-wide FMAs read half the peak on Zen 5 (full
// 512-bit FMA units), and oneDNN's AVX-512 kernels then ran at 160% "MFU".
// One thread, the best of 5 timed products (under a millisecond each)
// against best_peak_flops's best of 40 runs of a millisecond: on a loaded
// host a 50 ms peak run always shared its core (it read half the peak at
// load 9) while a short product often ran alone; short runs give both that
// chance.
TEST(Fp32Gemm, NoImplementationRunsAboveTheMeasuredPeak) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  // Instrumented, the FMA chains spill to memory and measure a tenth of the
  // peak, while the libraries' GEMMs run uninstrumented.
  GTEST_SKIP() << "the peak loop is instrumented under the sanitizers";
#endif
  const int saved = num_threads();
  set_num_threads(1);
  auto measure_peak = [] { return best_peak_flops(1); };
  double peak = measure_peak();
  const int64_t m = 384, n = 384, k = 384;
  const std::vector<float> a = random_vector(m * k, 1), b = random_vector(k * n, 2);
  std::vector<float> c(m * n);
  for (Fp32Gemm gemm : available()) {
    double best = 0.0;
    for (int rep = 0; rep < 6; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm_fp32_with(gemm, false, false, m, n, k, a.data(), k, b.data(), n, CWrite::kOverwrite,
                     c.data(), n);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) best = std::max(best, 2.0 * m * n * k / s);  // rep 0 creates primitives
    }
    // A peak measured while another process held the core reads low: before
    // calling the GEMM faster, measure the peak again (up to 4 more times,
    // keeping the best). A half-width peak stays half whatever the load.
    for (int again = 0; again < 4 && best > 1.25 * peak; ++again)
      peak = std::max(peak, measure_peak());
    std::printf("  %s: %.1f GFLOP/s on 1 thread, measured peak %.1f GFLOP/s\n", to_string(gemm),
                best / 1e9, peak / 1e9);
    // oneDNN reaches 99% of the peak here (Zen 5): 25% slack, far below the
    // 2x a half-width peak gave.
    EXPECT_LE(best, 1.25 * peak) << to_string(gemm);
  }
  set_num_threads(saved);
}

// openblas: OpenBLAS; onednn: oneDNN where it has more than its reference
// matmul, else OpenBLAS; unset: oneDNN where that matmul is a brgemm kernel
// (AVX-512), else OpenBLAS. ScopedFp32Gemm overrides it in scope.
TEST(Fp32Gemm, ChoiceFollowsTheEnvironment) {
  const char* env = std::getenv("REMAT_FP32_GEMM");
  const std::string forced = env == nullptr ? "" : env;
  const bool brgemm = detail::onednn_f32_available() &&
                      detail::onednn_f32_implementation(false, false, 256, 256, 256, 256, 256,
                                                        CWrite::kOverwrite, 256)
                              .rfind("brg", 0) == 0;
  Fp32Gemm expected = Fp32Gemm::kOpenblas;
  if (forced == "onednn" && detail::onednn_f32_available()) expected = Fp32Gemm::kOnednn;
  if (forced.empty() && brgemm) expected = Fp32Gemm::kOnednn;
  // An AVX-512 CPU (not capped) has oneDNN's brgemm f32 matmul in Debian's
  // libdnnl 2.6: the default there is oneDNN.
  if (forced.empty() && __builtin_cpu_supports("avx512f") && !isa_capped_at_avx2()) {
    EXPECT_EQ(fp32_gemm(), Fp32Gemm::kOnednn);
  }
  EXPECT_EQ(fp32_gemm(), expected) << to_string(fp32_gemm());
  {
    const ScopedFp32Gemm scope(Fp32Gemm::kOnednn);
    EXPECT_EQ(fp32_gemm(), Fp32Gemm::kOnednn);
  }
  EXPECT_EQ(fp32_gemm(), expected);
}

}  // namespace
}  // namespace remat::cpu
