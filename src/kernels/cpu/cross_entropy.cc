// Mean cross-entropy over rows of logits, and its in-place backward.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

void check_targets(const int32_t* targets, int64_t rows, int64_t vocab) {
  for (int64_t r = 0; r < rows; ++r)
    if (targets[r] < 0 || targets[r] >= vocab)
      throw std::out_of_range("cross_entropy: target " + std::to_string(targets[r]) + " of row " +
                              std::to_string(r) + " is outside the vocabulary of " +
                              std::to_string(vocab));
}

// log(sum_j exp(x_j)) of one row: max-subtracted, exponentials in float,
// summed in double in a fixed order.
float row_lse(const float* x, int64_t n) {
  int64_t j = 0;
  float m = -INFINITY;
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + j));
    m = detail::hmax(vm);
  }
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  if (std::isinf(m)) return m;  // all -inf (-inf) or some +inf (+inf)
  const __m256 vmax = _mm256_set1_ps(m);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 e = detail::exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmax));
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double s = detail::hsum_pd(_mm256_add_pd(acc0, acc1));
  for (; j < n; ++j) s += detail::exp_scalar(x[j] - m);
  return static_cast<float>(static_cast<double>(m) + std::log(s));
}

}  // namespace

void cross_entropy_add_rows(const float* logits, const int32_t* targets, int64_t rows,
                            int64_t vocab, float* lse, double* loss_sum) {
  check_targets(targets, rows, vocab);
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * vocab >= detail::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) lse[r] = row_lse(logits + r * vocab, vocab);
  double loss = *loss_sum;
  for (int64_t r = 0; r < rows; ++r)
    loss += static_cast<double>(lse[r]) - static_cast<double>(logits[r * vocab + targets[r]]);
  *loss_sum = loss;
}

double cross_entropy_forward(const float* logits, const int32_t* targets, int64_t rows,
                             int64_t vocab, float* lse) {
  double loss = 0.0;
  cross_entropy_add_rows(logits, targets, rows, vocab, lse, &loss);
  return rows > 0 ? loss / static_cast<double>(rows) : 0.0;
}

void cross_entropy_backward_inplace(float* logits, const int32_t* targets, const float* lse,
                                    int64_t rows, int64_t vocab, float scale) {
  check_targets(targets, rows, vocab);
  const int nt = num_threads();
  const __m256 vscale = _mm256_set1_ps(scale);
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * vocab >= detail::kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    float* x = logits + r * vocab;
    const int64_t t = targets[r];
    // (p_t - 1) * scale, from the same p the vector loop would produce.
    const float grad_t = (detail::exp_scalar(x[t] - lse[r]) - 1.0f) * scale;
    const __m256 vl = _mm256_set1_ps(lse[r]);
    int64_t j = 0;
    for (; j + 8 <= vocab; j += 8) {
      __m256 p = detail::exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), vl));
      _mm256_storeu_ps(x + j, _mm256_mul_ps(p, vscale));
    }
    for (; j < vocab; ++j) x[j] = detail::exp_scalar(x[j] - lse[r]) * scale;
    x[t] = grad_t;
  }
}

}  // namespace remat::cpu
