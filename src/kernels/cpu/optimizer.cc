// Optimizer helpers: global-norm pieces and AdamW.
#include <cmath>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

constexpr int64_t kChunk = 4096;         // floats summed into one double partial
constexpr int64_t kChunksPerPass = 256;  // partials held on the stack at a time

double chunk_sum_squares(const float* x, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  double s = detail::hsum_pd(_mm256_add_pd(acc0, acc1));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace

// Fixed chunks of kChunk floats, each summed in double; chunk partials are
// added in chunk order. The result is independent of the thread count.
double sum_squares(const float* x, int64_t n) {
  const int nt = num_threads();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  double total = 0.0;
  for (int64_t c0 = 0; c0 < chunks; c0 += kChunksPerPass) {
    const int64_t nc = chunks - c0 < kChunksPerPass ? chunks - c0 : kChunksPerPass;
    double partial[kChunksPerPass];
#pragma omp parallel for schedule(static) num_threads(nt) if (nc > 4)
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t i0 = (c0 + c) * kChunk;
      const int64_t len = n - i0 < kChunk ? n - i0 : kChunk;
      partial[c] = chunk_sum_squares(x + i0, len);
    }
    for (int64_t c = 0; c < nc; ++c) total += partial[c];
  }
  return total;
}

void scale_inplace(float* x, int64_t n, float factor) {
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

// torch.optim.AdamW (single-tensor path), step by step, on g = grad *
// grad_scale (clip_grad_norm_'s in-place multiply, done here as it is read):
//   param *= 1 - lr * wd
//   m = lerp(m, g, 1 - beta1) = m + (1 - beta1) * (g - m)
//   v = v * beta2 + (1 - beta2) * g * g
//   denom = sqrt(v) / sqrt(1 - beta2^step) + eps
//   param += -(lr / (1 - beta1^step)) * (m / denom)
// Scalars are formed in double, as Python does, then rounded to float.
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  float grad_scale) {
  const double lr_d = lr, b1 = beta1, b2 = beta2;
  const float decay = static_cast<float>(1.0 - lr_d * static_cast<double>(weight_decay));
  const float w1 = static_cast<float>(1.0 - b1);
  const float w2 = static_cast<float>(1.0 - b2);
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  const float neg_step_size = static_cast<float>(-(lr_d / bc1));
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  // Explicit AVX2 (sqrt without errno handling vectorizes only this way); the
  // scalar tail performs the same IEEE operations in the same order.
  const int64_t blocks = (n + kChunk - 1) / kChunk;
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kChunk;
    const int64_t i1 = i0 + kChunk < n ? i0 + kChunk : n;
    int64_t i = i0;
    const __m256 v_decay = _mm256_set1_ps(decay), v_w1 = _mm256_set1_ps(w1);
    const __m256 v_w2 = _mm256_set1_ps(w2), v_b2 = _mm256_set1_ps(beta2);
    const __m256 v_bc2 = _mm256_set1_ps(bc2_sqrt), v_eps = _mm256_set1_ps(eps);
    const __m256 v_step = _mm256_set1_ps(neg_step_size);
    const __m256 v_scale = _mm256_set1_ps(grad_scale);
    for (; i + 8 <= i1; i += 8) {
      const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), v_scale);
      const __m256 m0 = _mm256_loadu_ps(exp_avg + i);
      const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param + i), v_decay);
      const __m256 m = _mm256_add_ps(m0, _mm256_mul_ps(v_w1, _mm256_sub_ps(g, m0)));
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(exp_avg_sq + i), v_b2),
                                     _mm256_mul_ps(_mm256_mul_ps(v_w2, g), g));
      const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), v_bc2), v_eps);
      _mm256_storeu_ps(exp_avg + i, m);
      _mm256_storeu_ps(exp_avg_sq + i, v);
      _mm256_storeu_ps(param + i, _mm256_add_ps(p, _mm256_mul_ps(v_step, _mm256_div_ps(m, denom))));
    }
    for (; i < i1; ++i) {
      const float g = grad[i] * grad_scale;
      const float p = param[i] * decay;
      const float m = exp_avg[i] + w1 * (g - exp_avg[i]);
      const float v = exp_avg_sq[i] * beta2 + (w2 * g) * g;
      const float denom = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(v))) / bc2_sqrt + eps;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      param[i] = p + neg_step_size * (m / denom);
    }
  }
}

}  // namespace remat::cpu
