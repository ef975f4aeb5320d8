// RMSNorm over the last dimension: out = (x * rstd) * w, as torchtitan
// computes it. One body per direction, on fp32 operands (kernels.h) or on
// activations in bf16 (bf16.h's *_act, operands.h): a bf16 x is widened and
// a bf16 out rounded in registers, the bits of the fp32 kernel on widened
// copies, rounded.
#include <cmath>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/operands.h"

namespace remat::cpu {

namespace {

using detail::F32In;
using detail::F32Out;

// sum_i x[i]^2 over a row starting at `begin`, in double: 8 lanes widened
// to two 4-lane double accumulators, fixed horizontal order, scalar tail.
template <class X>
double sum_squares(X x, int64_t begin, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = x.load(begin + i);
    const __m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_fmadd_pd(v0, v0, acc0);
    acc1 = _mm256_fmadd_pd(v1, v1, acc1);
  }
  double s = detail::hsum_pd(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) s += static_cast<double>(x.at(begin + i)) * x.at(begin + i);
  return s;
}

template <class X, class Y>
void forward(X x, const float* weight, int64_t rows, int64_t dim, float eps, Y out, float* rstd) {
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * dim >= detail::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = r * dim;
    const float mean = static_cast<float>(sum_squares(x, row, dim) / static_cast<double>(dim));
    const float rs = 1.0f / std::sqrt(mean + eps);
    rstd[r] = rs;
    const __m256 vrs = _mm256_set1_ps(rs);
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8) {
      out.store(row + j,
                _mm256_mul_ps(_mm256_mul_ps(x.load(row + j), vrs), _mm256_loadu_ps(weight + j)));
    }
    for (; j < dim; ++j) out.set(row + j, (x.at(row + j) * rs) * weight[j]);
  }
}

// With g = dout and y = x * r * w, r = (mean(x^2) + eps)^-1/2:
//   dx = r * g * w - x * r^3 * sum_j(g_j * w_j * x_j) / dim
//   dw = sum over rows of g * x * r
template <class X>
void backward(const float* dout, X x, const float* weight, const float* rstd, int64_t rows,
              int64_t dim, float* dx, float* dweight, bool fresh_dx, bool fresh_dweight) {
  // A fresh dx row (kernels.h) is written as 0.0f + (...), the bits of
  // accumulating into zeros, without zeroing it first. Both loops add the same
  // value because its products are contracted by hand (std::fma): left to the
  // compiler (C++'s -ffp-contract=fast), each loop could contract them
  // differently, off by an ulp.
  const int nt = num_threads();
  const bool par = rows * dim >= detail::kParallelMin;
  if (dx != nullptr) {
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = r * dim;
      const float* gr = dout + row;
      float* dxr = dx + row;
      // sum_j g_j w_j x_j, in double, fixed order.
      __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
      int64_t j = 0;
      for (; j + 8 <= dim; j += 8) {
        __m256 gw = _mm256_mul_ps(_mm256_loadu_ps(gr + j), _mm256_loadu_ps(weight + j));
        __m256 vx = x.load(row + j);
        acc0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(gw)),
                               _mm256_cvtps_pd(_mm256_castps256_ps128(vx)), acc0);
        acc1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(gw, 1)),
                               _mm256_cvtps_pd(_mm256_extractf128_ps(vx, 1)), acc1);
      }
      double s = detail::hsum_pd(_mm256_add_pd(acc0, acc1));
      for (; j < dim; ++j) s += static_cast<double>(gr[j] * weight[j]) * x.at(row + j);
      const double rd = rstd[r];
      const float rs = rstd[r];
      const float c = static_cast<float>(rd * rd * rd * s / static_cast<double>(dim));
      if (fresh_dx) {
        for (int64_t i = 0; i < dim; ++i)
          dxr[i] = 0.0f + std::fma(rs, gr[i] * weight[i], -(x.at(row + i) * c));
      } else {
        for (int64_t i = 0; i < dim; ++i)
          dxr[i] += std::fma(rs, gr[i] * weight[i], -(x.at(row + i) * c));
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
        const int64_t xr = r * dim + c0;
        const float rs = rstd[r];
        for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(gr[i] * (x.at(xr + i) * rs));
      }
      // Fresh: 0.0f + sum, the bits of adding it to a zeroed dweight.
      for (int64_t i = 0; i < n; ++i)
        dweight[c0 + i] = (fresh_dweight ? 0.0f : dweight[c0 + i]) + static_cast<float>(acc[i]);
    }
  }
}

}  // namespace

void rmsnorm_forward(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                     float* out, float* rstd) {
  forward(F32In{x}, weight, rows, dim, eps, F32Out{out}, rstd);
}

void rmsnorm_backward(const float* dout, const float* x, const float* weight, const float* rstd,
                      int64_t rows, int64_t dim, float* dx, float* dweight, uint32_t fresh) {
  backward(dout, F32In{x}, weight, rstd, rows, dim, dx, dweight, (fresh & 1) != 0,
           (fresh & 2) != 0);
}

void rmsnorm_forward_act(ActIn x, const float* weight, int64_t rows, int64_t dim, float eps,
                         ActOut out, float* rstd) {
  detail::on_input_output(x, out,
                          [&](auto in, auto y) { forward(in, weight, rows, dim, eps, y, rstd); });
}

void rmsnorm_backward_act(const float* dout, ActIn x, const float* weight, const float* rstd,
                          int64_t rows, int64_t dim, float* dx, float* dweight, bool fresh_dweight,
                          bool fresh_dx) {
  detail::on_input(x, [&](auto in) {
    backward(dout, in, weight, rstd, rows, dim, dx, dweight, fresh_dx, fresh_dweight);
  });
}

}  // namespace remat::cpu
