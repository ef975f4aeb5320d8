// RMSNorm over the last dimension: out = (x * rstd) * w, as torchtitan computes it.
#include <cmath>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// sum_i a[i] * b[i] in double: 8 lanes of float products widened to two
// 4-lane double accumulators, fixed horizontal order, scalar tail.
double dot_double(const float* a, const float* b, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
    __m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(va));
    __m256d a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(va, 1));
    __m256d b0 = _mm256_cvtps_pd(_mm256_castps256_ps128(vb));
    __m256d b1 = _mm256_cvtps_pd(_mm256_extractf128_ps(vb, 1));
    acc0 = _mm256_fmadd_pd(a0, b0, acc0);
    acc1 = _mm256_fmadd_pd(a1, b1, acc1);
  }
  double s = detail::hsum_pd(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace

void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                     float* out, float* rstd) {
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * dim >= detail::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    const float mean = static_cast<float>(dot_double(xr, xr, dim) / static_cast<double>(dim));
    const float rs = 1.0f / std::sqrt(mean + eps);
    rstd[r] = rs;
    for (int64_t j = 0; j < dim; ++j) yr[j] = (xr[j] * rs) * weight[j];
  }
}

// With g = dout and y = x * r * w, r = (mean(x^2) + eps)^-1/2:
//   dx = r * g * w - x * r^3 * sum_j(g_j * w_j * x_j) / dim
//   dw = sum over rows of g * x * r
void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t rows, int64_t dim, float* dx, float* dweight, uint32_t fresh) {
  // A fresh dx row (kernels.h) is written as 0.0f + (...), the bits of
  // accumulating into zeros, without zeroing it first. Both loops add the same
  // value because its products are contracted by hand (std::fma): left to the
  // compiler (C++'s -ffp-contract=fast), each loop could contract them
  // differently, off by an ulp.
  const bool fresh_dx = (fresh & 1) != 0, fresh_dweight = (fresh & 2) != 0;
  const int nt = num_threads();
  const bool par = rows * dim >= detail::kParallelMin;
  if (dx != nullptr) {
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t r = 0; r < rows; ++r) {
      const float* gr = dout + r * dim;
      const float* xr = x + r * dim;
      float* dxr = dx + r * dim;
      // sum_j g_j w_j x_j, in double, fixed order.
      __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
      int64_t j = 0;
      for (; j + 8 <= dim; j += 8) {
        __m256 gw = _mm256_mul_ps(_mm256_loadu_ps(gr + j), _mm256_loadu_ps(weight + j));
        __m256 vx = _mm256_loadu_ps(xr + j);
        acc0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(gw)),
                               _mm256_cvtps_pd(_mm256_castps256_ps128(vx)), acc0);
        acc1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(gw, 1)),
                               _mm256_cvtps_pd(_mm256_extractf128_ps(vx, 1)), acc1);
      }
      double s = detail::hsum_pd(_mm256_add_pd(acc0, acc1));
      for (; j < dim; ++j) s += static_cast<double>(gr[j] * weight[j]) * xr[j];
      const double rd = rstd[r];
      const float rs = rstd[r];
      const float c = static_cast<float>(rd * rd * rd * s / static_cast<double>(dim));
      if (fresh_dx) {
        for (int64_t i = 0; i < dim; ++i)
          dxr[i] = 0.0f + std::fma(rs, gr[i] * weight[i], -(xr[i] * c));
      } else {
        for (int64_t i = 0; i < dim; ++i) dxr[i] += std::fma(rs, gr[i] * weight[i], -(xr[i] * c));
      }
    }
  }
  if (dweight != nullptr) {
    // Parallel over column blocks; each column sums its rows in row order (in
    // double), so the result does not depend on the thread count.
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kBlock;
      const int64_t n = c0 + kBlock < dim ? kBlock : dim - c0;
      double acc[kBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const float* gr = dout + r * dim + c0;
        const float* xr = x + r * dim + c0;
        const float rs = rstd[r];
        for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(gr[i] * (xr[i] * rs));
      }
      // Fresh: 0.0f + sum, the bits of adding it to a zeroed dweight.
      for (int64_t i = 0; i < n; ++i)
        dweight[c0 + i] = (fresh_dweight ? 0.0f : dweight[c0 + i]) + static_cast<float>(acc[i]);
    }
  }
}

}  // namespace remat::cpu
