// gemm_fp32 (gemm_fp32.h): the choice of implementation and the dispatch to
// OpenBLAS sgemm or oneDNN's f32 matmul (gemm_onednn.h).
#include "kernels/cpu/gemm_fp32.h"

#include <cblas.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/gemm_onednn.h"

namespace remat::cpu {

namespace {

Fp32Gemm choose_gemm() {
  const char* value = std::getenv("REMAT_FP32_GEMM");
  const std::string choice = value == nullptr ? "" : value;
  if (choice == "openblas") return Fp32Gemm::kOpenblas;
  if (!choice.empty() && choice != "onednn") {
    throw InputError("REMAT_FP32_GEMM=\"" + choice + "\": expected openblas, onednn or unset");
  }
  // oneDNN's reference matmul is a plain loop nest, far slower than sgemm.
  if (!detail::onednn_f32_available()) return Fp32Gemm::kOpenblas;
  if (choice == "onednn") return Fp32Gemm::kOnednn;
  // Unset: the faster where measured (bench/fp32_gemm.py, one step's GEMM
  // mix of each model). With AVX-512, oneDNN's brgemm kernels match Debian's
  // OpenBLAS 0.3.21 on its AVX-512 kernels (0.99-1.05x, Zen 5), beat it
  // 1.7-1.85x where OPENBLAS_CORETYPE pins it to AVX2 kernels, and write
  // fresh gradients without a memset; capped at AVX2, oneDNN runs its older
  // gemm:jit, 6-11% slower than OpenBLAS. So oneDNN where its f32 matmul is
  // a brgemm one.
  return detail::onednn_f32_is_brgemm() ? Fp32Gemm::kOnednn : Fp32Gemm::kOpenblas;
}

// ScopedFp32Gemm's choice: -1 when none is in scope, else a Fp32Gemm.
std::atomic<int> g_forced{-1};

void zero_c(int64_t m, int64_t n, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, sizeof(float) * n);
}

}  // namespace

Fp32Gemm fp32_gemm() {
  static const Fp32Gemm gemm = [] {
    // OpenBLAS stays single-threaded from the first GEMM on, not only once
    // set_num_threads has run: its threads would split k into partial sums
    // whose order changes the bits.
    openblas_set_num_threads(1);
    return choose_gemm();
  }();
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced < 0 ? gemm : static_cast<Fp32Gemm>(forced);
}

ScopedFp32Gemm::ScopedFp32Gemm(Fp32Gemm gemm) : saved_(g_forced.load()) {
  fp32_gemm();  // REMAT_FP32_GEMM is still checked
  g_forced.store(static_cast<int>(gemm));
}

ScopedFp32Gemm::~ScopedFp32Gemm() { g_forced.store(saved_); }

const char* to_string(Fp32Gemm gemm) {
  return gemm == Fp32Gemm::kOnednn ? "oneDNN f32 matmul" : "OpenBLAS sgemm";
}

void gemm_fp32_with(Fp32Gemm gemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const float* a, int64_t lda, const float* b, int64_t ldb, CWrite write,
                    float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // the sum of no products
    if (write != CWrite::kAccumulate) zero_c(m, n, c, ldc);
    return;
  }
  if (gemm == Fp32Gemm::kOnednn) {
    detail::gemm_onednn_f32(trans_a, trans_b, m, n, k, a, lda, b, ldb, write, c, ldc);
    return;
  }
  // Fresh is beta 0 here: OpenBLAS zeroes C, then adds the product to it.
  const float beta = write == CWrite::kAccumulate ? 1.0f : 0.0f;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void gemm_fp32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               int64_t lda, const float* b, int64_t ldb, CWrite write, float* c, int64_t ldc) {
  gemm_fp32_with(fp32_gemm(), trans_a, trans_b, m, n, k, a, lda, b, ldb, write, c, ldc);
}

}  // namespace remat::cpu
