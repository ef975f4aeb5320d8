// Elementwise kernels: SwiGLU gate (silu(a) * b) and the residual add.
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// Elementwise loops are split into fixed blocks of 8-float vectors; each
// element's arithmetic is the same whichever thread runs it.
constexpr int64_t kBlock = 4096;

}  // namespace

// silu(a) = a / (1 + exp(-a)), as PyTorch's CPU kernel computes it.
void silu_mul_forward(const float* a, const float* b, int64_t n, float* out) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int nt = num_threads();
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock;
    const int64_t i1 = i0 + kBlock < n ? i0 + kBlock : n;
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 va = _mm256_loadu_ps(a + i);
      __m256 e = detail::exp256(_mm256_sub_ps(zero, va));
      __m256 silu = _mm256_div_ps(va, _mm256_add_ps(one, e));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(b + i)));
    }
    for (; i < i1; ++i) {
      const float e = detail::exp_scalar(-a[i]);
      out[i] = (a[i] / (1.0f + e)) * b[i];
    }
  }
}

// With s = sigmoid(a): d silu / da = s * (1 + a * (1 - s)).
void silu_mul_backward(const float* dout, const float* a, const float* b, int64_t n, float* da,
                       float* db, uint32_t fresh) {
  // A fresh gradient starts from +0 (kernels.h); the branch is the same for
  // every element, so it costs nothing next to the exp and divisions.
  const bool fresh_a = (fresh & 1) != 0, fresh_b = (fresh & 2) != 0;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int nt = num_threads();
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock;
    const int64_t i1 = i0 + kBlock < n ? i0 + kBlock : n;
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 va = _mm256_loadu_ps(a + i);
      __m256 vb = _mm256_loadu_ps(b + i);
      __m256 g = _mm256_loadu_ps(dout + i);
      __m256 den = _mm256_add_ps(one, detail::exp256(_mm256_sub_ps(zero, va)));
      __m256 s = _mm256_div_ps(one, den);
      __m256 silu = _mm256_div_ps(va, den);
      // s * (1 + a * (1 - s))
      __m256 dsilu = _mm256_mul_ps(s, _mm256_add_ps(one, _mm256_mul_ps(va, _mm256_sub_ps(one, s))));
      const __m256 da0 = fresh_a ? zero : _mm256_loadu_ps(da + i);
      const __m256 db0 = fresh_b ? zero : _mm256_loadu_ps(db + i);
      _mm256_storeu_ps(da + i, _mm256_add_ps(da0, _mm256_mul_ps(_mm256_mul_ps(g, vb), dsilu)));
      _mm256_storeu_ps(db + i, _mm256_add_ps(db0, _mm256_mul_ps(g, silu)));
    }
    for (; i < i1; ++i) {
      const float den = 1.0f + detail::exp_scalar(-a[i]);
      const float s = 1.0f / den;
      const float silu = a[i] / den;
      const float dsilu = s * (1.0f + a[i] * (1.0f - s));
      da[i] = (fresh_a ? 0.0f : da[i]) + (dout[i] * b[i]) * dsilu;
      db[i] = (fresh_b ? 0.0f : db[i]) + dout[i] * silu;
    }
  }
}

void add_forward(const float* a, const float* b, int64_t n, float* out) {
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_backward(const float* dout, int64_t n, float* da, float* db, uint32_t fresh) {
  const int nt = num_threads();
  // g = 0.0f + dout for a fresh gradient: the bits a zeroed buffer would get.
  const bool fresh_a = (fresh & 1) != 0, fresh_b = (fresh & 2) != 0;
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    if (da != nullptr) da[i] = (fresh_a ? 0.0f : da[i]) + dout[i];
    if (db != nullptr) db[i] = (fresh_b ? 0.0f : db[i]) + dout[i];
  }
}

}  // namespace remat::cpu
