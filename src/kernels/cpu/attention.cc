// Causal grouped-query attention, flash-attention style: queries x keys tiles
// with an online softmax in the forward pass; the backward pass recomputes
// each probability tile from q, k and the saved log-sum-exp.
//
// Every tile product goes through one register-blocked micro-kernel
// (tile_gemm, tile.h). Tiles are packed into per-thread scratch with their
// widths padded to a multiple of 8 (zeros), so the micro-kernel never needs a
// tail. Scratch is a few tiles per thread, independent of the sequence length.
//
// Causality: tile pairs above the diagonal are skipped (about half the work);
// the diagonal tile masks key > query.
//
// Determinism: a forward work item owns one (batch, head, group of query
// tiles): its rows of out and lse. A backward work item owns one (batch, kv
// head): its dk and dv rows and the dq rows of its query heads. Within an item
// the order of every reduction is fixed, so results do not depend on the
// thread count at all.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tile.h"

namespace remat::cpu {

namespace {

using detail::pack_rows;
using detail::pack_transposed;
using detail::tile_gemm;

constexpr int64_t kTile = 64;  // queries per tile = keys per tile
constexpr float kLog2e = 1.44269504088896341f;
// Query tiles per forward work item: each packed K/V tile serves all of them.
constexpr int64_t kQueryGroup = 4;
// Key tiles held per backward pass over the query tiles: each packed Q/dO
// tile serves all of them.
constexpr int64_t kKeyGroup = 2;

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

// Forward pass, one (query tile, key tile) pair: s = qs @ kt, then the online
// softmax update of the tile's running max m, sum l and accumulator acc.
// Scores are kept raw (unscaled); p = 2^((s - m) * c) with c = scale * log2(e).
struct QueryTile {
  float* qs;   // [kTile x Dp] packed queries
  float* acc;  // [kTile x Dp] unnormalised output
  float* m;    // [kTile] running max of raw scores (32-byte aligned)
  float* l;    // [kTile] running sum of p
  int64_t q0;  // first query's position (past + its row in the call)
  int64_t M;   // rows
};

void forward_pair(const QueryTile& t, const float* kt, const float* vs, int64_t k0, int64_t nk,
                  int64_t Dp, float c, float* s) {
  const int64_t np = detail::round_up(nk, 8);
  const __m256 vc = _mm256_set1_ps(c);
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256 zero = _mm256_setzero_ps();
  tile_gemm(t.M, np, Dp, t.qs, Dp, 1, kt, np, s, np, false);
  // Pass 1: the new running max of every row, and the factor alpha that
  // rescales what was accumulated under the old max (8 rows at a time).
  alignas(32) float alpha[kTile];
  for (int64_t r = 0; r < t.M; ++r) {
    const float* sr = s + r * np;
    const int64_t nv = visible_keys(t.q0 + r, k0, nk);
    __m256 vmax = neg_inf;
    for (int64_t j = 0; j < np; j += 8) {
      __m256 x = _mm256_loadu_ps(sr + j);
      if (nv < np) x = mask_tail(x, j, nv, neg_inf);
      vmax = _mm256_max_ps(vmax, x);
    }
    alpha[r] = detail::hmax(vmax);  // the tile max, for now
  }
  for (int64_t r = t.M; r < detail::round_up(t.M, 8); ++r) alpha[r] = -INFINITY;
  for (int64_t r = 0; r < t.M; r += 8) {
    const __m256 m_old = _mm256_load_ps(t.m + r);
    const __m256 m_new = _mm256_max_ps(m_old, _mm256_load_ps(alpha + r));
    // 0 when m_old = -inf; exactly 1 when the maximum did not move.
    _mm256_store_ps(alpha + r, detail::exp2_256(_mm256_mul_ps(_mm256_sub_ps(m_old, m_new), vc)));
    _mm256_store_ps(t.m + r, m_new);
  }
  // Pass 2: p = 2^((s - m) * c), its row sums, and the rescaled accumulator.
  for (int64_t r = 0; r < t.M; ++r) {
    float* sr = s + r * np;
    const int64_t nv = visible_keys(t.q0 + r, k0, nk);
    const __m256 neg_mc = _mm256_set1_ps(-t.m[r] * c);
    __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
    for (int64_t j = 0; j < np; j += 8) {
      __m256 p = detail::exp2_256(_mm256_fmadd_ps(_mm256_loadu_ps(sr + j), vc, neg_mc));
      if (nv < np) p = mask_tail(p, j, nv, zero);
      _mm256_storeu_ps(sr + j, p);
      if ((j & 8) == 0)
        sum0 = _mm256_add_ps(sum0, p);
      else
        sum1 = _mm256_add_ps(sum1, p);
    }
    const float a = alpha[r];
    t.l[r] = t.l[r] * a + detail::hsum(_mm256_add_ps(sum0, sum1));
    if (a != 1.0f) {
      const __m256 va = _mm256_set1_ps(a);
      float* ar = t.acc + r * Dp;
      for (int64_t i = 0; i < Dp; i += 8)
        _mm256_storeu_ps(ar + i, _mm256_mul_ps(_mm256_loadu_ps(ar + i), va));
    }
  }
  // acc += p @ vs
  tile_gemm(t.M, Dp, np, s, np, 1, vs, Dp, t.acc, Dp, true);
}

// A packed key tile for the backward pass, with its dk and dv accumulators.
struct KeyTile {
  float* ks;   // [kTile x Dp]
  float* kt;   // [Dp x kTile]
  float* vt;   // [Dp x kTile]
  float* dka;  // [kTile x Dp]
  float* dva;  // [kTile x Dp]
  int64_t k0;  // first key position
  int64_t nk;  // keys
};

// Backward pass, one (query tile, key tile) pair. qs, dos: packed q and dO
// rows; lse2 = lse * log2(e) and delta per row. Accumulates into the key
// tile's dka, dva and into dqt (overwritten when first).
void backward_pair(const KeyTile& kt, const float* qs, const float* dos, const float* lse2,
                   const float* delta, int64_t q0, int64_t M, int64_t Dp, float scale, float* p,
                   float* ds, float* dqt, bool first) {
  const int64_t np = detail::round_up(kt.nk, 8);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 vc = _mm256_set1_ps(scale * kLog2e);
  const __m256 zero = _mm256_setzero_ps();
  // p <- raw scores qs @ kt ; ds <- dP = dos @ vt
  tile_gemm(M, np, Dp, qs, Dp, 1, kt.kt, np, p, np, false);
  tile_gemm(M, np, Dp, dos, Dp, 1, kt.vt, np, ds, np, false);
  for (int64_t r = 0; r < M; ++r) {
    float* pr = p + r * np;
    float* dsr = ds + r * np;
    const int64_t nv = visible_keys(q0 + r, kt.k0, kt.nk);
    const bool masked = nv < np;
    const __m256 vl = _mm256_set1_ps(lse2[r]);
    const __m256 vd = _mm256_set1_ps(delta[r]);
    for (int64_t j = 0; j < np; j += 8) {
      // p = exp(scale * s - lse) = 2^(c * s - lse * log2(e))
      __m256 pj = detail::exp2_256(_mm256_fmsub_ps(_mm256_loadu_ps(pr + j), vc, vl));
      if (masked) pj = mask_tail(pj, j, nv, zero);
      _mm256_storeu_ps(pr + j, pj);
      // dS = P * (dP - delta) * scale (the scale of both dq and dk)
      __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(dsr + j), vd), pj);
      _mm256_storeu_ps(dsr + j, _mm256_mul_ps(d, vscale));
    }
  }
  // dva += p^T @ dos ; dka += ds^T @ qs ; dqt (+)= ds @ ks
  tile_gemm(np, Dp, M, p, 1, np, dos, Dp, kt.dva, Dp, true);
  tile_gemm(np, Dp, M, ds, 1, np, qs, Dp, kt.dka, Dp, true);
  tile_gemm(M, Dp, np, ds, np, 1, kt.ks, Dp, dqt, Dp, !first);
}

// Normalises a finished query tile into its rows of out (from `out`, one
// row every q_stride floats) and their log-sum-exp (from `lse`).
void finish_query_tile(const QueryTile& qt, float* out, int64_t q_stride, int64_t D, int64_t Dp,
                       float scale, float* lse) {
  for (int64_t r = 0; r < qt.M; ++r) {
    const float inv = 1.0f / qt.l[r];
    float* o = out + r * q_stride;
    const float* ar = qt.acc + r * Dp;
    for (int64_t i = 0; i < D; ++i) o[i] = ar[i] * inv;
    lse[r] = static_cast<float>(static_cast<double>(qt.m[r]) * scale +
                                std::log(static_cast<double>(qt.l[r])));
  }
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, int64_t batch, int64_t seq,
                       int64_t heads, int64_t kv_heads, int64_t head_dim, float* out, float* lse) {
  attention_forward_cached(q, k, v, batch, seq, /*past=*/0, heads, kv_heads, head_dim, out, lse);
}

// With past > 0 the diagonal is no longer tile-aligned: a key tile is skipped
// for a query tile only when it lies wholly after the tile's last query, and
// rows that see none of a tile's keys leave their running max and sum as they
// were (all their lanes are masked). With past = 0 the tiles visited, and
// their order, are exactly those of the aligned diagonal.
void attention_forward_cached(const float* q, const float* k, const float* v, int64_t batch,
                              int64_t seq, int64_t past, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, float* out, float* lse) {
  check_shapes(heads, kv_heads, head_dim);
  if (past < 0) throw std::invalid_argument("attention: past must be >= 0");
  const int64_t D = head_dim, Dp = detail::round_up(D, 8);
  const int64_t group = heads / kv_heads;
  const int64_t kv_len = past + seq;
  const int64_t q_stride = heads * D, kv_stride = kv_heads * D;
  const int64_t tiles = (seq + kTile - 1) / kTile;
  const int64_t tile_groups = (tiles + kQueryGroup - 1) / kQueryGroup;
  const int64_t items = batch * heads * tile_groups;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const float c = scale * kLog2e;
  const int nt = num_threads();
  const bool parallel = items > 1 && batch * heads * seq * kv_len * D >= (int64_t{1} << 20);

  // Items are independent (each writes only its own rows of out and lse), so
  // dynamic scheduling balances the causal triangle without touching results.
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    // Later (costlier) query tiles first within each (batch, head).
    const int64_t tg = tile_groups - 1 - item % tile_groups;
    const int64_t h = (item / tile_groups) % heads;
    const int64_t b = item / (tile_groups * heads);
    const int64_t g = h / group;
    const int64_t t_begin = tg * kQueryGroup;
    const int64_t t_end = t_begin + kQueryGroup < tiles ? t_begin + kQueryGroup : tiles;

    float* scratch = detail::thread_scratch(static_cast<size_t>(
        kQueryGroup * (2 * kTile * Dp + 2 * kTile) + 2 * kTile * Dp + kTile * kTile));
    float* kt = scratch;          // [Dp x kTile], K tile transposed
    float* vs = kt + kTile * Dp;  // [kTile x Dp]
    float* s = vs + kTile * Dp;   // [kTile x kTile], scores then probabilities
    float* next = s + kTile * kTile;
    QueryTile qtiles[kQueryGroup];
    for (int64_t t = t_begin; t < t_end; ++t) {
      QueryTile& qt = qtiles[t - t_begin];
      qt.qs = next;
      qt.acc = qt.qs + kTile * Dp;
      qt.m = qt.acc + kTile * Dp;
      qt.l = qt.m + kTile;
      next = qt.l + kTile;
      qt.q0 = past + t * kTile;
      qt.M = seq - t * kTile < kTile ? seq - t * kTile : kTile;
      pack_rows(q + (b * seq + t * kTile) * q_stride + h * D, q_stride, qt.M, D, Dp, qt.qs);
      std::memset(qt.acc, 0, sizeof(float) * qt.M * Dp);
      for (int64_t r = 0; r < kTile; ++r) {
        qt.m[r] = -INFINITY;
        qt.l[r] = 0.0f;
      }
    }

    // Each K/V tile is packed once and used by every query tile of the group,
    // up to the tile holding the group's last query position.
    const QueryTile& last = qtiles[t_end - 1 - t_begin];
    const int64_t key_tiles = (last.q0 + last.M - 1) / kTile + 1;
    for (int64_t ktile = 0; ktile < key_tiles; ++ktile) {
      const int64_t k0 = ktile * kTile;
      const int64_t nk = kv_len - k0 < kTile ? kv_len - k0 : kTile;
      const int64_t np = detail::round_up(nk, 8);
      pack_transposed(k + (b * kv_len + k0) * kv_stride + g * D, kv_stride, nk, D, Dp, np, kt);
      pack_rows(v + (b * kv_len + k0) * kv_stride + g * D, kv_stride, nk, D, Dp, vs);
      for (int64_t j = nk; j < np; ++j)
        for (int64_t i = 0; i < Dp; ++i) vs[j * Dp + i] = 0.0f;
      for (int64_t t = t_begin; t < t_end; ++t) {
        const QueryTile& qt = qtiles[t - t_begin];
        if (k0 <= qt.q0 + qt.M - 1) forward_pair(qt, kt, vs, k0, nk, Dp, c, s);
      }
    }

    for (int64_t t = t_begin; t < t_end; ++t) {
      finish_query_tile(qtiles[t - t_begin], out + ((b * seq + t * kTile) * heads + h) * D,
                        q_stride, D, Dp, scale, lse + (b * heads + h) * seq + t * kTile);
    }
  }
}

namespace {

// delta = rowsum(dO * O) per [batch, head, position].
void row_deltas(const float* dout, const float* out, int64_t batch, int64_t seq, int64_t heads,
                int64_t D, int nt, float* delta) {
  const int64_t q_stride = heads * D;
#pragma omp parallel for schedule(static) \
    num_threads(nt) if (batch * seq * heads * D >= detail::kParallelMin)
  for (int64_t t = 0; t < batch * seq; ++t) {
    const int64_t b = t / seq, i = t % seq;
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = t * q_stride + h * D;
      delta[(b * heads + h) * seq + i] = detail::dot(dout + off, out + off, D);
    }
  }
}

// Packs the keys and values of the tile starting at position k0 of the
// sequence starting at row `row0` (k, v point at the kv head's first
// column) and clears its gradient accumulators.
void pack_key_tile(const float* k, const float* v, int64_t row0, int64_t k0, int64_t seq,
                   int64_t kv_stride, int64_t D, int64_t Dp, KeyTile& kt) {
  kt.k0 = k0;
  kt.nk = seq - kt.k0 < kTile ? seq - kt.k0 : kTile;
  const int64_t np = detail::round_up(kt.nk, 8);
  const float* kb = k + (row0 + kt.k0) * kv_stride;
  const float* vb = v + (row0 + kt.k0) * kv_stride;
  pack_rows(kb, kv_stride, kt.nk, D, Dp, kt.ks);
  for (int64_t j = kt.nk; j < np; ++j)
    for (int64_t i = 0; i < Dp; ++i) kt.ks[j * Dp + i] = 0.0f;
  pack_transposed(kb, kv_stride, kt.nk, D, Dp, np, kt.kt);
  pack_transposed(vb, kv_stride, kt.nk, D, Dp, np, kt.vt);
  std::memset(kt.dka, 0, sizeof(float) * np * Dp);
  std::memset(kt.dva, 0, sizeof(float) * np * Dp);
}

// Adds a key tile's accumulated dk and dv into the gradients (dk, dv point
// at the kv head's first column). Each key row is added exactly once, so a
// fresh dk / dv (kernels.h) starts that row from +0.
void add_key_tile_grads(const KeyTile& kt, int64_t row0, int64_t kv_stride, int64_t D, int64_t Dp,
                        float* dk, float* dv, bool fresh_dk, bool fresh_dv) {
  for (int64_t j = 0; j < kt.nk; ++j) {
    const int64_t off = (row0 + kt.k0 + j) * kv_stride;
    for (int64_t i = 0; i < D; ++i) {
      dk[off + i] = (fresh_dk ? 0.0f : dk[off + i]) + kt.dka[j * Dp + i];
      dv[off + i] = (fresh_dv ? 0.0f : dv[off + i]) + kt.dva[j * Dp + i];
    }
  }
}

}  // namespace

// With P = softmax(scale * q k^T) (causal), O = P v, dO given:
//   dv = P^T dO;  dP = dO v^T;  dS = P * (dP - rowsum(dO * O));
//   dq = scale * dS k;  dk = scale * dS^T q.
// workspace holds rowsum(dO * O) per [batch, head, position].
void attention_backward(const float* dout, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, int64_t batch, int64_t seq,
                        int64_t heads, int64_t kv_heads, int64_t head_dim, float* dq, float* dk,
                        float* dv, float* workspace, uint32_t fresh) {
  check_shapes(heads, kv_heads, head_dim);
  const int64_t D = head_dim, Dp = detail::round_up(D, 8);
  const int64_t group = heads / kv_heads;
  const int64_t q_stride = heads * D, kv_stride = kv_heads * D;
  const int64_t tiles = (seq + kTile - 1) / kTile;
  const int64_t key_groups = (tiles + kKeyGroup - 1) / kKeyGroup;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const int nt = num_threads();
  const bool fresh_dq = (fresh & 1) != 0, fresh_dk = (fresh & 2) != 0, fresh_dv = (fresh & 4) != 0;
  float* delta = workspace;
  row_deltas(dout, out, batch, seq, heads, D, nt, delta);

  const int64_t items = batch * kv_heads;
  const bool parallel = items > 1 && batch * heads * seq * seq * D >= (int64_t{1} << 19);
#pragma omp parallel for schedule(static, 1) num_threads(nt) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t b = item / kv_heads, g = item % kv_heads;

    float* scratch = detail::thread_scratch(static_cast<size_t>(
        kKeyGroup * 5 * kTile * Dp + 3 * kTile * Dp + 2 * kTile * kTile + 2 * kTile));
    float* qs = scratch;               // [kTile x Dp]  Q tile
    float* dos = qs + kTile * Dp;      // [kTile x Dp]  dO tile
    float* dqt = dos + kTile * Dp;     // [kTile x Dp]  dq of the query tile
    float* p = dqt + kTile * Dp;       // [kTile x kTile]
    float* ds = p + kTile * kTile;     // [kTile x kTile]
    float* lse2 = ds + kTile * kTile;  // [kTile]
    float* next = lse2 + kTile;
    KeyTile ktiles[kKeyGroup];
    for (KeyTile& kt : ktiles) {
      kt.ks = next;
      kt.kt = kt.ks + kTile * Dp;
      kt.vt = kt.kt + kTile * Dp;
      kt.dka = kt.vt + kTile * Dp;
      kt.dva = kt.dka + kTile * Dp;
      next = kt.dva + kTile * Dp;
    }

    for (int64_t kg = 0; kg < key_groups; ++kg) {
      const int64_t kt_begin = kg * kKeyGroup;
      const int64_t kt_end = kt_begin + kKeyGroup < tiles ? kt_begin + kKeyGroup : tiles;
      for (int64_t t = kt_begin; t < kt_end; ++t) {
        pack_key_tile(k + g * D, v + g * D, b * seq, t * kTile, seq, kv_stride, D, Dp,
                      ktiles[t - kt_begin]);
      }

      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* lse_h = lse + (b * heads + h) * seq;
        const float* delta_h = delta + (b * heads + h) * seq;
        // Each Q/dO tile is packed once and used by every key tile of the group.
        for (int64_t qt = kt_begin; qt < tiles; ++qt) {
          const int64_t q0 = qt * kTile;
          const int64_t M = seq - q0 < kTile ? seq - q0 : kTile;
          const int64_t row0 = (b * seq + q0) * q_stride + h * D;
          pack_rows(q + row0, q_stride, M, D, Dp, qs);
          pack_rows(dout + row0, q_stride, M, D, Dp, dos);
          for (int64_t r = 0; r < M; ++r) lse2[r] = lse_h[q0 + r] * kLog2e;
          const int64_t last = qt < kt_end - 1 ? qt : kt_end - 1;
          for (int64_t t = kt_begin; t <= last; ++t)
            backward_pair(ktiles[t - kt_begin], qs, dos, lse2, delta_h + q0, q0, M, Dp, scale, p,
                          ds, dqt, t == kt_begin);
          // The first key group reaches every query tile: a fresh dq row
          // starts from +0 there.
          const bool dq_from_zero = fresh_dq && kg == 0;
          for (int64_t r = 0; r < M; ++r) {
            float* dqr = dq + row0 + r * q_stride;
            const float* src = dqt + r * Dp;
            for (int64_t i = 0; i < D; ++i) dqr[i] = (dq_from_zero ? 0.0f : dqr[i]) + src[i];
          }
        }
      }

      for (int64_t t = kt_begin; t < kt_end; ++t) {
        add_key_tile_grads(ktiles[t - kt_begin], b * seq, kv_stride, D, Dp, dk + g * D, dv + g * D,
                           fresh_dk, fresh_dv);
      }
    }
  }
}

}  // namespace remat::cpu
