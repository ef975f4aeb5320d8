// Small dense tile products and packing for the attention kernels: one
// register-blocked micro-kernel (6 rows x 16 columns of accumulators, AVX2
// FMA) that every tile product of the forward and backward passes goes
// through, and the routines that copy strided q/k/v rows into contiguous,
// zero-padded tiles for it. Each output element is reduced over k in order,
// so results are deterministic.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/bf16.h"

namespace remat::cpu::detail {

// C[r, n] (+)= sum_k A(r, k) * B[k, n] for r < R, n < 8 * NV, where
// A(r, k) = a[r * ars + k * aks] (so A may be read transposed) and B is
// row-major with leading dimension ldb. The R x NV accumulators are named
// variables (GCC keeps an array of vectors on the stack, storing it every
// iteration); unused ones are compiled out by `if constexpr`.
template <int R, int NV>
inline void micro_kernel(int64_t K, const float* a, int64_t ars, int64_t aks, const float* b,
                         int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  static_assert(R >= 1 && R <= 6 && NV >= 1 && NV <= 2);
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  if (accumulate) {
    auto load = [&](int r, __m256& x0, __m256& x1) {
      x0 = _mm256_loadu_ps(c + r * ldc);
      if constexpr (NV > 1) x1 = _mm256_loadu_ps(c + r * ldc + 8);
    };
    load(0, c00, c01);
    if constexpr (R > 1) load(1, c10, c11);
    if constexpr (R > 2) load(2, c20, c21);
    if constexpr (R > 3) load(3, c30, c31);
    if constexpr (R > 4) load(4, c40, c41);
    if constexpr (R > 5) load(5, c50, c51);
  }
  const float* ak = a;
  const float* bk = b;
  for (int64_t k = 0; k < K; ++k, ak += aks, bk += ldb) {
    const __m256 b0 = _mm256_loadu_ps(bk);
    const __m256 b1 = NV > 1 ? _mm256_loadu_ps(bk + 8) : b0;
    __m256 av = _mm256_broadcast_ss(ak);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    if constexpr (NV > 1) c01 = _mm256_fmadd_ps(av, b1, c01);
    if constexpr (R > 1) {
      av = _mm256_broadcast_ss(ak + ars);
      c10 = _mm256_fmadd_ps(av, b0, c10);
      if constexpr (NV > 1) c11 = _mm256_fmadd_ps(av, b1, c11);
    }
    if constexpr (R > 2) {
      av = _mm256_broadcast_ss(ak + 2 * ars);
      c20 = _mm256_fmadd_ps(av, b0, c20);
      if constexpr (NV > 1) c21 = _mm256_fmadd_ps(av, b1, c21);
    }
    if constexpr (R > 3) {
      av = _mm256_broadcast_ss(ak + 3 * ars);
      c30 = _mm256_fmadd_ps(av, b0, c30);
      if constexpr (NV > 1) c31 = _mm256_fmadd_ps(av, b1, c31);
    }
    if constexpr (R > 4) {
      av = _mm256_broadcast_ss(ak + 4 * ars);
      c40 = _mm256_fmadd_ps(av, b0, c40);
      if constexpr (NV > 1) c41 = _mm256_fmadd_ps(av, b1, c41);
    }
    if constexpr (R > 5) {
      av = _mm256_broadcast_ss(ak + 5 * ars);
      c50 = _mm256_fmadd_ps(av, b0, c50);
      if constexpr (NV > 1) c51 = _mm256_fmadd_ps(av, b1, c51);
    }
  }
  auto store = [&](int r, __m256 x0, __m256 x1) {
    _mm256_storeu_ps(c + r * ldc, x0);
    if constexpr (NV > 1) _mm256_storeu_ps(c + r * ldc + 8, x1);
  };
  store(0, c00, c01);
  if constexpr (R > 1) store(1, c10, c11);
  if constexpr (R > 2) store(2, c20, c21);
  if constexpr (R > 3) store(3, c30, c31);
  if constexpr (R > 4) store(4, c40, c41);
  if constexpr (R > 5) store(5, c50, c51);
}

template <int NV>
inline void micro_rows(int64_t rows, int64_t K, const float* a, int64_t ars, int64_t aks,
                       const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  switch (rows) {
    case 6:
      micro_kernel<6, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
      break;
    case 5:
      micro_kernel<5, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
      break;
    case 4:
      micro_kernel<4, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
      break;
    case 3:
      micro_kernel<3, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
      break;
    case 2:
      micro_kernel<2, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
      break;
    default:
      micro_kernel<1, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
      break;
  }
}

// C[M x N] (+)= A[M x K] * B[K x N]; N must be a multiple of 8.
inline void tile_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars, int64_t aks,
                      const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t n0 = 0; n0 < N; n0 += 16) {
    const bool two = N - n0 >= 16;
    for (int64_t m0 = 0; m0 < M; m0 += 6) {
      const int64_t rows = M - m0 < 6 ? M - m0 : 6;
      const float* am = a + m0 * ars;
      float* cm = c + m0 * ldc + n0;
      if (two)
        micro_rows<2>(rows, K, am, ars, aks, b + n0, ldb, cm, ldc, accumulate);
      else
        micro_rows<1>(rows, K, am, ars, aks, b + n0, ldb, cm, ldc, accumulate);
    }
  }
}

// dst[r, 0:dp] = src[r * src_stride + 0:d], zero-padded to dp columns.
inline void pack_rows(const float* src, int64_t src_stride, int64_t rows, int64_t d, int64_t dp,
                      float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * src_stride;
    float* out = dst + r * dp;
    for (int64_t i = 0; i < d; ++i) out[i] = in[i];
    for (int64_t i = d; i < dp; ++i) out[i] = 0.0f;
  }
}

// Transposes the 8x8 block at src (row stride ss) into dst (row stride ds).
inline void transpose8x8(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ss);
  __m256 r2 = _mm256_loadu_ps(src + 2 * ss), r3 = _mm256_loadu_ps(src + 3 * ss);
  __m256 r4 = _mm256_loadu_ps(src + 4 * ss), r5 = _mm256_loadu_ps(src + 5 * ss);
  __m256 r6 = _mm256_loadu_ps(src + 6 * ss), r7 = _mm256_loadu_ps(src + 7 * ss);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + ds, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ds, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ds, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ds, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ds, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ds, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ds, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// dst[i, j] = src[j * src_stride + i] for i < d, j < rows; zero elsewhere in
// the dp x np tile. Reads the source row by row (8x8 blocks), never down a
// column: the source rows are heads * head_dim floats apart.
inline void pack_transposed(const float* src, int64_t src_stride, int64_t rows, int64_t d,
                            int64_t dp, int64_t np, float* dst) {
  for (int64_t j0 = 0; j0 < rows; j0 += 8) {
    const int64_t jn = rows - j0 < 8 ? rows - j0 : 8;
    for (int64_t i0 = 0; i0 < d; i0 += 8) {
      const int64_t in = d - i0 < 8 ? d - i0 : 8;
      if (jn == 8 && in == 8) {
        transpose8x8(src + j0 * src_stride + i0, src_stride, dst + i0 * np + j0, np);
      } else {
        for (int64_t j = 0; j < jn; ++j)
          for (int64_t i = 0; i < in; ++i)
            dst[(i0 + i) * np + j0 + j] = src[(j0 + j) * src_stride + i0 + i];
      }
    }
  }
  for (int64_t i = 0; i < dp; ++i)
    for (int64_t j = (i < d ? rows : 0); j < np; ++j) dst[i * np + j] = 0.0f;
}

// The same two packings from bf16 rows (bf16 activations, bf16.h), widened
// exactly as they are copied: the tiles hold the fp32 values that packing
// the widened rows would, so every product after them is the fp32 one.
inline void pack_rows(const bf16* src, int64_t src_stride, int64_t rows, int64_t d, int64_t dp,
                      float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* in = src + r * src_stride;
    float* out = dst + r * dp;
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) _mm256_storeu_ps(out + i, load_bf16x8(in + i));
    for (; i < d; ++i) out[i] = from_bf16(in[i]);
    for (i = d; i < dp; ++i) out[i] = 0.0f;
  }
}

inline void pack_transposed(const bf16* src, int64_t src_stride, int64_t rows, int64_t d,
                            int64_t dp, int64_t np, float* dst) {
  for (int64_t j0 = 0; j0 < rows; j0 += 8) {
    const int64_t jn = rows - j0 < 8 ? rows - j0 : 8;
    for (int64_t i0 = 0; i0 < d; i0 += 8) {
      const int64_t in = d - i0 < 8 ? d - i0 : 8;
      if (jn == 8 && in == 8) {
        float block[64];  // the 8x8 block widened, then transposed as fp32
        for (int64_t j = 0; j < 8; ++j)
          _mm256_storeu_ps(block + 8 * j, load_bf16x8(src + (j0 + j) * src_stride + i0));
        transpose8x8(block, 8, dst + i0 * np + j0, np);
      } else {
        for (int64_t j = 0; j < jn; ++j)
          for (int64_t i = 0; i < in; ++i)
            dst[(i0 + i) * np + j0 + j] = from_bf16(src[(j0 + j) * src_stride + i0 + i]);
      }
    }
  }
  for (int64_t i = 0; i < dp; ++i)
    for (int64_t j = (i < d ? rows : 0); j < np; ++j) dst[i * np + j] = 0.0f;
}

}  // namespace remat::cpu::detail
