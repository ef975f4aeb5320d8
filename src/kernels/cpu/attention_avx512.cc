// The AVX-512 instantiation of the attention kernels (attention_impl.h): 16
// lanes, masked tails, exp2 through vscalefps, and a register-blocked tile
// micro-kernel (6 rows x 64 columns down to 16 rows x 16 columns).
//
// Only the code after the target pragma is AVX-512: every header it uses is
// included before it, so their inline functions (shared with the AVX2 code of
// other files) stay AVX2, and attention_impl.h's templates, instantiated here
// only, with this file's vector type, are distinct symbols.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tile.h"

#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps(), a self-initialised
// variable, as the unused merge source of their unmasked forms; inlined here,
// -Wmaybe-uninitialized reports it. No variable of this file is involved.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/cpu/attention_impl.h"

namespace remat::cpu::detail {

namespace {

// C[r, n] (+)= sum_k A(r, k) * B[k, n] for r < R, n < 16 * NV (as tile.h's
// micro_kernel, on 16 lanes). Fully unrolled, so the accumulator array lives
// in registers. A row stride kArs > 0 is fixed at compile time (ars is then
// ignored): the R row addresses become displacements off one register, where
// 16 runtime row offsets would not fit in the general registers and spill.
template <int R, int NV, int64_t kArs = 0>
inline void micro_kernel_512(int64_t K, const float* a, int64_t ars, int64_t aks, const float* b,
                             int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if constexpr (kArs > 0) ars = kArs;
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k, a += aks, b += ldb) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * ars]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

// Rows per micro-kernel call for NV vectors of columns: 16 to 24 accumulators
// of the 32 registers, and a divisor of the 16 or 64 rows of most products
// where that fits (a short tail has too few accumulators to hide the FMA
// latency: 64 rows as 5 x 12 + 4 ran its last 4 at a fraction of the rate).
constexpr int rows_for(int nv) { return nv >= 4 ? 6 : nv == 3 ? 8 : nv == 2 ? 8 : 16; }

template <int NV, int R = rows_for(NV)>
inline void micro_rows_512(int64_t rows, int64_t K, const float* a, int64_t ars, int64_t aks,
                           const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if constexpr (R == 1) {
    micro_kernel_512<1, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
  } else {
    if (rows == R) return micro_kernel_512<R, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate);
    micro_rows_512<NV, R - 1>(rows, K, a, ars, aks, b, ldb, c, ldc, accumulate);
  }
}

template <int NV>
void column_block(int64_t M, int64_t K, const float* a, int64_t ars, int64_t aks, const float* b,
                  int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  constexpr int64_t kRows = rows_for(NV);
  // 16 rows per call: the row strides of the 16-column products (a
  // probability tile of 64 lanes per key row, or a packed K / V tile read
  // transposed) at compile time.
  if (NV == 1 && (ars == 64 || ars == 1) && M % kRows == 0) {
    for (int64_t m0 = 0; m0 < M; m0 += kRows) {
      if (ars == 64)
        micro_kernel_512<kRows, NV, 64>(K, a + m0 * ars, ars, aks, b, ldb, c + m0 * ldc, ldc,
                                        accumulate);
      else
        micro_kernel_512<kRows, NV, 1>(K, a + m0 * ars, ars, aks, b, ldb, c + m0 * ldc, ldc,
                                       accumulate);
    }
    return;
  }
  for (int64_t m0 = 0; m0 < M;) {
    // A remainder of a few rows past the last full block is split evenly
    // with it (8 rows as 4 + 4, not 6 + 2): a block of 1 or 2 rows holds too
    // few accumulators to hide the FMA latency.
    const int64_t left = M - m0;
    const int64_t rows = left <= kRows ? left : left < kRows + kRows / 2 ? left / 2 : kRows;
    micro_rows_512<NV>(rows, K, a + m0 * ars, ars, aks, b, ldb, c + m0 * ldc, ldc, accumulate);
    m0 += rows;
  }
}

// attention_impl.h's vector ISA, on 16 lanes of AVX-512F.
struct Avx512 {
  using Reg = __m512;
  static constexpr int64_t kW = 16;
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Reg x) { _mm512_storeu_ps(p, x); }
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg fmsub(Reg a, Reg b, Reg c) { return _mm512_fmsub_ps(a, b, c); }

  // 2^x (the Cephes exp2f polynomial of exp2_256, ~1 ulp), scaled by
  // vscalefps. Clamped to [-150, 127]: 2^-150 times the polynomial (at most
  // sqrt 2) rounds to exactly 0, so -inf gives 0; 127 gives 2^127 (finite).
  // max/min return their second operand when either is NaN: NaN propagates.
  static Reg exp2(Reg x) {
    x = _mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-150.0f), x));
    const Reg fx = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_sub_ps(x, fx);  // exact, in [-0.5, 0.5]
    Reg y = _mm512_set1_ps(1.535336188319500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.339887440266574e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(9.618437357674640e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.550332471162809e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(2.402264791363012e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(6.931472028550421e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, fx);
  }

  // Lanes j0 + i < lo become fill.
  static Reg keep_from(Reg x, int64_t j0, int64_t lo, Reg fill) {
    if (lo <= j0) return x;
    if (lo >= j0 + kW) return fill;
    const auto lanes = static_cast<unsigned>(lo - j0);
    return _mm512_mask_blend_ps(static_cast<__mmask16>(~((1u << lanes) - 1)), fill, x);
  }

  static bool equal_all(Reg a, Reg b) {
    return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ) == static_cast<__mmask16>(0xFFFF);
  }

  // Column blocks of 64, then one of the remaining 16, 32 or 48.
  static void gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars, int64_t aks,
                   const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    int64_t n0 = 0;
    for (; n0 + 64 <= N; n0 += 64)
      column_block<4>(M, K, a, ars, aks, b + n0, ldb, c + n0, ldc, accumulate);
    switch ((N - n0) / 16) {
      case 3:
        column_block<3>(M, K, a, ars, aks, b + n0, ldb, c + n0, ldc, accumulate);
        break;
      case 2:
        column_block<2>(M, K, a, ars, aks, b + n0, ldb, c + n0, ldc, accumulate);
        break;
      case 1:
        column_block<1>(M, K, a, ars, aks, b + n0, ldb, c + n0, ldc, accumulate);
        break;
      default:
        break;
    }
  }
};

using Avx512Attention = AttentionKernel<Avx512>;

}  // namespace

void attention_forward_avx512(const float* q, const float* k, const float* v, int64_t batch,
                              int64_t seq, int64_t past, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, float* out, float* lse) {
  Avx512Attention::forward(q, k, v, batch, seq, past, heads, kv_heads, head_dim, out, lse);
}

void attention_backward_avx512(const float* dout, const float* q, const float* k, const float* v,
                               const float* lse, const float* delta, int64_t batch, int64_t seq,
                               int64_t heads, int64_t kv_heads, int64_t head_dim, float* dq,
                               float* dk, float* dv, uint32_t fresh) {
  Avx512Attention::backward(dout, q, k, v, lse, delta, batch, seq, heads, kv_heads, head_dim, dq,
                            dk, dv, fresh);
}

void attention_forward_avx512(const bf16* q, const bf16* k, const bf16* v, int64_t batch,
                              int64_t seq, int64_t past, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, bf16* out, float* lse) {
  Avx512Attention::forward(q, k, v, batch, seq, past, heads, kv_heads, head_dim, out, lse);
}

void attention_backward_avx512(const float* dout, const bf16* q, const bf16* k, const bf16* v,
                               const float* lse, const float* delta, int64_t batch, int64_t seq,
                               int64_t heads, int64_t kv_heads, int64_t head_dim, float* dq,
                               float* dk, float* dv, uint32_t fresh) {
  Avx512Attention::backward(dout, q, k, v, lse, delta, batch, seq, heads, kv_heads, head_dim, dq,
                            dk, dv, fresh);
}

}  // namespace remat::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
