// Causal grouped-query attention, flash-attention style: queries x keys tiles
// with an online softmax in the forward pass; the backward pass recomputes
// each probability tile from q, k and the saved log-sum-exp.
//
// Every tile product goes through one register-blocked micro-kernel
// (tile_gemm). Tiles are packed into per-thread scratch with their widths
// padded to a multiple of 8 (zeros), so the micro-kernel never needs a tail.
//
// Determinism: the forward pass owns one (batch, head, query tile) per work
// item; the backward pass owns one (batch, kv head) per work item (its dk, dv
// rows and the dq rows of its query heads). Within an item the order of every
// reduction is fixed, so results do not depend on the thread count at all.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

constexpr int64_t kTile = 64;  // queries per tile = keys per tile

// C[r, n] (+)= sum_k A(r, k) * B[k, n] for r < R, n < 8 * NV, where
// A(r, k) = a[r * ars + k * aks] (so A may be read transposed) and B is
// row-major with leading dimension ldb. Accumulators stay in registers.
template <int R, int NV>
inline void micro_kernel(int64_t K, const float* a, int64_t ars, int64_t aks, const float* b,
                         int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + k * ldb + 8 * v);
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * ars + k * aks);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
}

template <int NV>
inline void micro_rows(int64_t rows, int64_t K, const float* a, int64_t ars, int64_t aks,
                       const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  switch (rows) {
    case 6: micro_kernel<6, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate); break;
    case 5: micro_kernel<5, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate); break;
    case 4: micro_kernel<4, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate); break;
    case 3: micro_kernel<3, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate); break;
    case 2: micro_kernel<2, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate); break;
    default: micro_kernel<1, NV>(K, a, ars, aks, b, ldb, c, ldc, accumulate); break;
  }
}

// C[M x N] (+)= A[M x K] * B[K x N]; N must be a multiple of 8.
void tile_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars, int64_t aks,
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
void pack_rows(const float* src, int64_t src_stride, int64_t rows, int64_t d, int64_t dp,
               float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dp, src + r * src_stride, sizeof(float) * d);
    for (int64_t i = d; i < dp; ++i) dst[r * dp + i] = 0.0f;
  }
}

// dst[i, j] = src[j * src_stride + i] for i < dp, j < np (zero outside d x rows).
void pack_transposed(const float* src, int64_t src_stride, int64_t rows, int64_t d,
                     int64_t dp, int64_t np, float* dst) {
  for (int64_t i = 0; i < dp; ++i) {
    float* out = dst + i * np;
    if (i >= d) {
      for (int64_t j = 0; j < np; ++j) out[j] = 0.0f;
      continue;
    }
    for (int64_t j = 0; j < rows; ++j) out[j] = src[j * src_stride + i];
    for (int64_t j = rows; j < np; ++j) out[j] = 0.0f;
  }
}

// Number of keys of the tile starting at k0 (nk keys) that query position i
// may see.
inline int64_t visible_keys(int64_t i, int64_t k0, int64_t nk) {
  const int64_t v = i - k0 + 1;
  return v < nk ? v : nk;
}

// Lanes j >= n of an 8-lane chunk starting at column j0 are replaced by fill.
inline __m256 mask_tail(__m256 x, int64_t j0, int64_t n, __m256 fill) {
  if (j0 + 8 <= n) return x;
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(j0)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
  return _mm256_blendv_ps(fill, x, _mm256_castsi256_ps(keep));
}

void check_shapes(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  if (kv_heads <= 0 || heads % kv_heads != 0)
    throw std::invalid_argument("attention: heads must be a multiple of kv_heads");
  if (head_dim <= 0 || head_dim > 1024)
    throw std::invalid_argument("attention: head_dim must be in [1, 1024]");
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, int64_t batch,
                       int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                       float* out, float* lse) {
  check_shapes(heads, kv_heads, head_dim);
  const int64_t D = head_dim, Dp = detail::round_up(D, 8);
  const int64_t group = heads / kv_heads;
  const int64_t q_stride = heads * D, kv_stride = kv_heads * D;
  const int64_t tiles = (seq + kTile - 1) / kTile;
  const int64_t items = batch * heads * tiles;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int nt = num_threads();

  // Items are independent (each writes only its own rows of out and lse), so
  // dynamic scheduling balances the causal triangle without touching results.
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (items > 1)
  for (int64_t item = 0; item < items; ++item) {
    // Larger query tiles first within each (batch, head).
    const int64_t qt = tiles - 1 - item % tiles;
    const int64_t h = (item / tiles) % heads;
    const int64_t b = item / (tiles * heads);
    const int64_t g = h / group;
    const int64_t q0 = qt * kTile;
    const int64_t M = seq - q0 < kTile ? seq - q0 : kTile;

    float* qs = detail::thread_scratch(static_cast<size_t>(4 * kTile * Dp + kTile * kTile +
                                                           2 * kTile));
    float* kt = qs + kTile * Dp;     // [Dp x kTile], K tile transposed
    float* vs = kt + kTile * Dp;     // [kTile x Dp]
    float* acc = vs + kTile * Dp;    // [kTile x Dp], unnormalised output
    float* s = acc + kTile * Dp;     // [kTile x kTile], scores then probabilities
    float* m = s + kTile * kTile;    // running row max
    float* l = m + kTile;            // running row sum

    pack_rows(q + (b * seq + q0) * q_stride + h * D, q_stride, M, D, Dp, qs);
    std::memset(acc, 0, sizeof(float) * M * Dp);
    for (int64_t r = 0; r < M; ++r) {
      m[r] = -INFINITY;
      l[r] = 0.0f;
    }
    const __m256 vscale = _mm256_set1_ps(scale);
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);

    for (int64_t ktile = 0; ktile <= qt; ++ktile) {
      const int64_t k0 = ktile * kTile;
      const int64_t nk = seq - k0 < kTile ? seq - k0 : kTile;
      const int64_t np = detail::round_up(nk, 8);
      const float* kb = k + (b * seq + k0) * kv_stride + g * D;
      const float* vb = v + (b * seq + k0) * kv_stride + g * D;
      pack_transposed(kb, kv_stride, nk, D, Dp, np, kt);
      pack_rows(vb, kv_stride, nk, D, Dp, vs);
      for (int64_t j = nk; j < np; ++j)
        for (int64_t i = 0; i < Dp; ++i) vs[j * Dp + i] = 0.0f;

      // s = qs @ kt
      tile_gemm(M, np, Dp, qs, Dp, 1, kt, np, s, np, false);

      for (int64_t r = 0; r < M; ++r) {
        float* sr = s + r * np;
        const int64_t nv = visible_keys(q0 + r, k0, nk);
        __m256 vmax = neg_inf;
        for (int64_t j = 0; j < np; j += 8) {
          __m256 x = mask_tail(_mm256_mul_ps(_mm256_loadu_ps(sr + j), vscale), j, nv, neg_inf);
          _mm256_storeu_ps(sr + j, x);
          vmax = _mm256_max_ps(vmax, x);
        }
        const float tile_max = detail::hmax(vmax);
        const float m_new = m[r] > tile_max ? m[r] : tile_max;  // finite: nv >= 1
        const float alpha = detail::exp_scalar(m[r] - m_new);   // 0 when m[r] = -inf
        const __m256 vm = _mm256_set1_ps(m_new);
        __m256 vsum = _mm256_setzero_ps();
        for (int64_t j = 0; j < np; j += 8) {
          __m256 p = detail::exp256(_mm256_sub_ps(_mm256_loadu_ps(sr + j), vm));
          _mm256_storeu_ps(sr + j, p);
          vsum = _mm256_add_ps(vsum, p);
        }
        l[r] = l[r] * alpha + detail::hsum(vsum);
        m[r] = m_new;
        if (alpha != 1.0f) {
          const __m256 va = _mm256_set1_ps(alpha);
          float* ar = acc + r * Dp;
          for (int64_t i = 0; i < Dp; i += 8)
            _mm256_storeu_ps(ar + i, _mm256_mul_ps(_mm256_loadu_ps(ar + i), va));
        }
      }
      // acc += p @ vs
      tile_gemm(M, Dp, np, s, np, 1, vs, Dp, acc, Dp, true);
    }

    for (int64_t r = 0; r < M; ++r) {
      const float inv = 1.0f / l[r];
      float* o = out + (b * seq + q0 + r) * q_stride + h * D;
      const float* ar = acc + r * Dp;
      for (int64_t i = 0; i < D; ++i) o[i] = ar[i] * inv;
      lse[(b * heads + h) * seq + q0 + r] =
          static_cast<float>(static_cast<double>(m[r]) + std::log(static_cast<double>(l[r])));
    }
  }
}

int64_t attention_backward_workspace_floats(int64_t batch, int64_t seq, int64_t heads) {
  return batch * heads * seq;
}

// With P = softmax(scale * q k^T) (causal), O = P v, dO given:
//   dv = P^T dO;  dP = dO v^T;  dS = P * (dP - rowsum(dO * O));
//   dq = scale * dS k;  dk = scale * dS^T q.
// workspace holds rowsum(dO * O) per [batch, head, position].
void attention_backward(const float* dout, const float* q, const float* k,
                        const float* v, const float* out, const float* lse,
                        int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                        int64_t head_dim, float* dq, float* dk, float* dv,
                        float* workspace) {
  check_shapes(heads, kv_heads, head_dim);
  const int64_t D = head_dim, Dp = detail::round_up(D, 8);
  const int64_t group = heads / kv_heads;
  const int64_t q_stride = heads * D, kv_stride = kv_heads * D;
  const int64_t tiles = (seq + kTile - 1) / kTile;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int nt = num_threads();
  float* delta = workspace;

#pragma omp parallel for schedule(static) num_threads(nt) if (batch * seq * heads * D >= detail::kParallelMin)
  for (int64_t t = 0; t < batch * seq; ++t) {
    const int64_t b = t / seq, i = t % seq;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = t * q_stride + h * D;
      delta[(b * heads + h) * seq + i] = detail::dot(dout + off, out + off, D);
    }
  }

  const int64_t items = batch * kv_heads;
#pragma omp parallel for schedule(static, 1) num_threads(nt) if (items > 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / kv_heads, g = item % kv_heads;

    float* ks = detail::thread_scratch(static_cast<size_t>(8 * kTile * Dp + 2 * kTile * kTile));
    float* kt = ks + kTile * Dp;   // [Dp x kTile]  K tile transposed
    float* vt = kt + kTile * Dp;   // [Dp x kTile]  V tile transposed
    float* dka = vt + kTile * Dp;  // [kTile x Dp]  dk accumulator of the key tile
    float* dva = dka + kTile * Dp; // [kTile x Dp]  dv accumulator of the key tile
    float* qs = dva + kTile * Dp;  // [kTile x Dp]  Q tile
    float* dos = qs + kTile * Dp;  // [kTile x Dp]  dO tile
    float* dqt = dos + kTile * Dp; // [kTile x Dp]  dq of the tile pair
    float* p = dqt + kTile * Dp;               // [kTile x kTile]
    float* ds = p + kTile * kTile;             // [kTile x kTile]
    const __m256 vscale = _mm256_set1_ps(scale);
    const __m256 zero = _mm256_setzero_ps();

    for (int64_t ktile = 0; ktile < tiles; ++ktile) {
      const int64_t k0 = ktile * kTile;
      const int64_t nk = seq - k0 < kTile ? seq - k0 : kTile;
      const int64_t np = detail::round_up(nk, 8);
      const float* kb = k + (b * seq + k0) * kv_stride + g * D;
      const float* vb = v + (b * seq + k0) * kv_stride + g * D;
      pack_rows(kb, kv_stride, nk, D, Dp, ks);
      for (int64_t j = nk; j < np; ++j)
        for (int64_t i = 0; i < Dp; ++i) ks[j * Dp + i] = 0.0f;
      pack_transposed(kb, kv_stride, nk, D, Dp, np, kt);
      pack_transposed(vb, kv_stride, nk, D, Dp, np, vt);
      std::memset(dka, 0, sizeof(float) * np * Dp);
      std::memset(dva, 0, sizeof(float) * np * Dp);

      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* lse_h = lse + (b * heads + h) * seq;
        const float* delta_h = delta + (b * heads + h) * seq;
        for (int64_t qt = ktile; qt < tiles; ++qt) {
          const int64_t q0 = qt * kTile;
          const int64_t M = seq - q0 < kTile ? seq - q0 : kTile;
          const int64_t row0 = (b * seq + q0) * q_stride + h * D;
          pack_rows(q + row0, q_stride, M, D, Dp, qs);
          pack_rows(dout + row0, q_stride, M, D, Dp, dos);

          // p = exp(scale * qs @ kt - lse), causal-masked
          tile_gemm(M, np, Dp, qs, Dp, 1, kt, np, p, np, false);
          // ds <- dP = dos @ vt
          tile_gemm(M, np, Dp, dos, Dp, 1, vt, np, ds, np, false);
          for (int64_t r = 0; r < M; ++r) {
            float* pr = p + r * np;
            float* dsr = ds + r * np;
            const int64_t nv = visible_keys(q0 + r, k0, nk);
            const __m256 vl = _mm256_set1_ps(lse_h[q0 + r]);
            const __m256 vd = _mm256_set1_ps(delta_h[q0 + r]);
            for (int64_t j = 0; j < np; j += 8) {
              __m256 x = _mm256_fmsub_ps(_mm256_loadu_ps(pr + j), vscale, vl);
              __m256 pj = mask_tail(detail::exp256(x), j, nv, zero);
              _mm256_storeu_ps(pr + j, pj);
              // dS = P * (dP - delta) * scale (the scale of both dq and dk)
              __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(dsr + j), vd), pj);
              _mm256_storeu_ps(dsr + j, _mm256_mul_ps(d, vscale));
            }
          }
          // dva += p^T @ dos ; dka += ds^T @ qs
          tile_gemm(np, Dp, M, p, 1, np, dos, Dp, dva, Dp, true);
          tile_gemm(np, Dp, M, ds, 1, np, qs, Dp, dka, Dp, true);
          // dq[rows] += ds @ ks
          tile_gemm(M, Dp, np, ds, np, 1, ks, Dp, dqt, Dp, false);
          for (int64_t r = 0; r < M; ++r) {
            float* dqr = dq + row0 + r * q_stride;
            const float* src = dqt + r * Dp;
            for (int64_t i = 0; i < D; ++i) dqr[i] += src[i];
          }
        }
      }
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t off = (b * seq + k0 + j) * kv_stride + g * D;
        for (int64_t i = 0; i < D; ++i) {
          dk[off + i] += dka[j * Dp + i];
          dv[off + i] += dva[j * Dp + i];
        }
      }
    }
  }
}

}  // namespace remat::cpu
