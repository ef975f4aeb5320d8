// Causal grouped-query attention, flash-attention style, written once over a
// vector ISA V: queries x keys tiles with an online softmax in the forward
// pass; the backward pass recomputes each probability tile from q, k and the
// saved log-sum-exp. attention.cc instantiates it for AVX2 (V = Avx2),
// attention_avx512.cc for AVX-512 (V = Avx512); kernels.h's entry points
// choose one at run time. Everything here is a template on V, so the two
// instantiations are distinct symbols even though the AVX-512 one is compiled
// for another target.
//
// V provides: Reg, kW (lanes), load/store/set1/zero/add/sub/mul/max,
// fmadd(a, b, c) = a * b + c, fmsub(a, b, c) = a * b - c, exp2 (exactly 0 for
// -inf), hsum/hmax (fixed order), keep_below(x, j0, n, fill) (lanes j0 + i >= n
// become fill), and gemm: C[M x N] (+)= A[M x K] B[K x N] with A(r, k) =
// a[r * ars + k * aks], N a multiple of kW, each element reduced over k in
// order.
//
// Every tile product goes through V::gemm. Tiles are packed into per-thread
// scratch with their widths padded to a multiple of kW (zeros), so the
// micro-kernel never needs a tail. Scratch is a few tiles per thread (fixed
// per-thread buffers, independent of the sequence length; the planner books
// none of it, as for the GEMM packing buffers).
//
// Causality: tile pairs above the diagonal are skipped (about half the
// work); within the diagonal tile, a row's vector chunks that lie wholly past
// its last visible key are written as zeros without computing them (they
// would be masked to zeros anyway, and adding +0 to the row sums changes no
// bit), and the chunk holding the boundary masks key > query.
//
// Determinism: a forward work item owns one (batch, head, group of query
// tiles): its rows of out and lse. A backward work item owns one (batch, kv
// head): its dk and dv rows and the dq rows of its query heads. Within an item
// the order of every reduction is fixed, so results do not depend on the
// thread count at all (they do depend on V: the ISAs round differently).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/tile.h"

namespace remat::cpu::detail {

template <class V>
struct AttentionKernel {
  using Reg = typename V::Reg;
  static constexpr int64_t kW = V::kW;
  static constexpr int64_t kTile = 64;  // queries per tile = keys per tile
  static constexpr float kLog2e = 1.44269504088896341f;
  // Query tiles per forward work item: each packed K/V tile serves all of them.
  static constexpr int64_t kQueryGroup = 4;
  // Key tiles held per backward pass over the query tiles: each packed Q/dO
  // tile serves all of them.
  static constexpr int64_t kKeyGroup = 2;
  static_assert(kTile % kW == 0);

  // Number of keys of the tile starting at k0 (nk keys) that query position
  // i may see.
  static int64_t visible_keys(int64_t i, int64_t k0, int64_t nk) {
    const int64_t v = i - k0 + 1;
    return v < nk ? v : nk;
  }

  // Asks for `rows` rows of d floats at src, one every `stride` floats,
  // ahead of their packing. The rows are heads * head_dim floats apart,
  // scattered beyond what the hardware prefetcher follows, and packing them
  // on demand stalled on every row; the current tile's work hides the fetch.
  static void prefetch_rows(const float* src, int64_t stride, int64_t rows, int64_t d) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = src + r * stride;
      for (int64_t i = 0; i < d; i += 16) __builtin_prefetch(row + i);
      __builtin_prefetch(row + d - 1);  // the last line of an unaligned row
    }
  }

  // Forward pass state of one query tile. Scores are kept raw (unscaled);
  // p = 2^((s - m) * c) with c = scale * log2(e).
  struct QueryTile {
    float* qs;   // [kTile x Dp] packed queries
    float* acc;  // [kTile x Dp] unnormalised output
    float* m;    // [kTile] running max of raw scores
    float* l;    // [kTile] running sum of p
    int64_t q0;  // first query's position (past + its row in the call)
    int64_t M;   // rows
  };

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

  // The new running max of every row of s (t.M rows of np scores), and in
  // alpha the factor that rescales what was accumulated under the old max.
  static void update_max(const QueryTile& t, const float* s, int64_t k0, int64_t nk, int64_t np,
                         float c, float* alpha) {
    const Reg neg_inf = V::set1(-INFINITY);
    for (int64_t r = 0; r < t.M; ++r) {
      const float* sr = s + r * np;
      const int64_t nv = visible_keys(t.q0 + r, k0, nk);
      Reg vmax = neg_inf;
      for (int64_t j = 0; j < nv; j += kW)
        vmax = V::max(vmax, V::keep_below(V::load(sr + j), j, nv, neg_inf));
      alpha[r] = V::hmax(vmax);  // the tile max, for now (-inf when nothing is visible)
    }
    for (int64_t r = t.M; r < round_up(t.M, kW); ++r) alpha[r] = -INFINITY;
    const Reg vc = V::set1(c);
    for (int64_t r = 0; r < t.M; r += kW) {
      const Reg m_old = V::load(t.m + r);
      const Reg m_new = V::max(m_old, V::load(alpha + r));
      // 0 when m_old = -inf; exactly 1 when the maximum did not move.
      V::store(alpha + r, V::exp2(V::mul(V::sub(m_old, m_new), vc)));
      V::store(t.m + r, m_new);
    }
  }

  // Forward pass, one (query tile, key tile) pair: s = qs @ kt, then the
  // online softmax update of the tile's running max m, sum l and accumulator.
  static void forward_pair(const QueryTile& t, const float* kt, const float* vs, int64_t k0,
                           int64_t nk, int64_t Dp, float c, float* s) {
    const int64_t np = round_up(nk, kW);
    const Reg vc = V::set1(c);
    const Reg zero = V::zero();
    V::gemm(t.M, np, Dp, t.qs, Dp, 1, kt, np, s, np, false);
    alignas(64) float alpha[kTile];
    update_max(t, s, k0, nk, np, c, alpha);
    // p = 2^((s - m) * c), its row sums, and the rescaled accumulator.
    for (int64_t r = 0; r < t.M; ++r) {
      float* sr = s + r * np;
      const int64_t nv = visible_keys(t.q0 + r, k0, nk);
      const Reg neg_mc = V::set1(-t.m[r] * c);
      Reg sum0 = zero, sum1 = zero;
      int64_t j = 0;
      for (; j < nv; j += kW) {
        const Reg p = V::keep_below(V::exp2(V::fmadd(V::load(sr + j), vc, neg_mc)), j, nv, zero);
        V::store(sr + j, p);
        if ((j / kW & 1) == 0)
          sum0 = V::add(sum0, p);
        else
          sum1 = V::add(sum1, p);
      }
      for (; j < np; j += kW) V::store(sr + j, zero);
      const float a = alpha[r];
      t.l[r] = t.l[r] * a + V::hsum(V::add(sum0, sum1));
      if (a != 1.0f) {
        const Reg va = V::set1(a);
        float* ar = t.acc + r * Dp;
        for (int64_t i = 0; i < Dp; i += kW) V::store(ar + i, V::mul(V::load(ar + i), va));
      }
    }
    // acc += p @ vs
    V::gemm(t.M, Dp, np, s, np, 1, vs, Dp, t.acc, Dp, true);
  }

  // Backward pass, one (query tile, key tile) pair. qs, dos: packed q and dO
  // rows; lse2 = lse * log2(e) and delta per row. Accumulates into the key
  // tile's dka, dva and into dqt (overwritten when first).
  static void backward_pair(const KeyTile& kt, const float* qs, const float* dos, const float* lse2,
                            const float* delta, int64_t q0, int64_t M, int64_t Dp, float scale,
                            float* p, float* ds, float* dqt, bool first) {
    const int64_t np = round_up(kt.nk, kW);
    const Reg vscale = V::set1(scale);
    const Reg vc = V::set1(scale * kLog2e);
    const Reg zero = V::zero();
    // p <- raw scores qs @ kt ; ds <- dP = dos @ vt
    V::gemm(M, np, Dp, qs, Dp, 1, kt.kt, np, p, np, false);
    V::gemm(M, np, Dp, dos, Dp, 1, kt.vt, np, ds, np, false);
    for (int64_t r = 0; r < M; ++r) {
      float* pr = p + r * np;
      float* dsr = ds + r * np;
      const int64_t nv = visible_keys(q0 + r, kt.k0, kt.nk);
      const Reg vl = V::set1(lse2[r]);
      const Reg vd = V::set1(delta[r]);
      int64_t j = 0;
      for (; j < nv; j += kW) {
        // p = exp(scale * s - lse) = 2^(c * s - lse * log2(e))
        const Reg pj = V::keep_below(V::exp2(V::fmsub(V::load(pr + j), vc, vl)), j, nv, zero);
        V::store(pr + j, pj);
        // dS = P * (dP - delta) * scale (the scale of both dq and dk)
        V::store(dsr + j, V::mul(V::mul(V::sub(V::load(dsr + j), vd), pj), vscale));
      }
      for (; j < np; j += kW) {
        V::store(pr + j, zero);
        V::store(dsr + j, zero);
      }
    }
    // dva += p^T @ dos ; dka += ds^T @ qs ; dqt (+)= ds @ ks
    V::gemm(np, Dp, M, p, 1, np, dos, Dp, kt.dva, Dp, true);
    V::gemm(np, Dp, M, ds, 1, np, qs, Dp, kt.dka, Dp, true);
    V::gemm(M, Dp, np, ds, np, 1, kt.ks, Dp, dqt, Dp, !first);
  }

  // Normalises a finished query tile into its rows of out (from `out`, one
  // row every q_stride floats) and their log-sum-exp (from `lse`).
  static void finish_query_tile(const QueryTile& qt, float* out, int64_t q_stride, int64_t D,
                                int64_t Dp, float scale, float* lse) {
    for (int64_t r = 0; r < qt.M; ++r) {
      const float inv = 1.0f / qt.l[r];
      float* o = out + r * q_stride;
      const float* ar = qt.acc + r * Dp;
      for (int64_t i = 0; i < D; ++i) o[i] = ar[i] * inv;
      lse[r] = static_cast<float>(static_cast<double>(qt.m[r]) * scale +
                                  std::log(static_cast<double>(qt.l[r])));
    }
  }

  // Lays out and fills the query tiles t_begin .. t_end - 1 of (b, h) in
  // scratch starting at `next`.
  static void start_query_tiles(const float* q, int64_t b, int64_t h, int64_t seq, int64_t past,
                                int64_t q_stride, int64_t D, int64_t Dp, int64_t t_begin,
                                int64_t t_end, float* next, QueryTile* qtiles) {
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
  }

  // With past > 0 the diagonal is no longer tile-aligned: a key tile is
  // skipped for a query tile only when it lies wholly after the tile's last
  // query, and rows that see none of a tile's keys leave their running max and
  // sum as they were (all their lanes are masked). With past = 0 the tiles
  // visited, and their order, are exactly those of the aligned diagonal.
  static void forward(const float* q, const float* k, const float* v, int64_t batch, int64_t seq,
                      int64_t past, int64_t heads, int64_t kv_heads, int64_t D, float* out,
                      float* lse) {
    const int64_t Dp = round_up(D, kW);
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

    // Items are independent (each writes only its own rows of out and lse),
    // so dynamic scheduling balances the causal triangle without touching
    // results.
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (parallel)
    for (int64_t item = 0; item < items; ++item) {
      // Later (costlier) query tiles first within each (batch, head).
      const int64_t tg = tile_groups - 1 - item % tile_groups;
      const int64_t h = (item / tile_groups) % heads;
      const int64_t b = item / (tile_groups * heads);
      const int64_t g = h / group;
      const int64_t t_begin = tg * kQueryGroup;
      const int64_t t_end = t_begin + kQueryGroup < tiles ? t_begin + kQueryGroup : tiles;

      float* scratch = thread_scratch(static_cast<size_t>(
          kQueryGroup * (2 * kTile * Dp + 2 * kTile) + 2 * kTile * Dp + kTile * kTile));
      float* kt = scratch;          // [Dp x kTile], K tile transposed
      float* vs = kt + kTile * Dp;  // [kTile x Dp]
      float* s = vs + kTile * Dp;   // [kTile x kTile], scores then probabilities
      QueryTile qtiles[kQueryGroup];
      start_query_tiles(q, b, h, seq, past, q_stride, D, Dp, t_begin, t_end, s + kTile * kTile,
                        qtiles);

      // Each K/V tile is packed once and used by every query tile of the
      // group, up to the tile holding the group's last query position.
      const QueryTile& last = qtiles[t_end - 1 - t_begin];
      const int64_t key_tiles = (last.q0 + last.M - 1) / kTile + 1;
      for (int64_t ktile = 0; ktile < key_tiles; ++ktile) {
        const int64_t k0 = ktile * kTile;
        const int64_t nk = kv_len - k0 < kTile ? kv_len - k0 : kTile;
        const int64_t np = round_up(nk, kW);
        pack_transposed(k + (b * kv_len + k0) * kv_stride + g * D, kv_stride, nk, D, Dp, np, kt);
        pack_rows(v + (b * kv_len + k0) * kv_stride + g * D, kv_stride, nk, D, Dp, vs);
        for (int64_t j = nk; j < np; ++j)
          for (int64_t i = 0; i < Dp; ++i) vs[j * Dp + i] = 0.0f;
        if (ktile + 1 < key_tiles) {
          const int64_t next = k0 + kTile, rows = kv_len - next < kTile ? kv_len - next : kTile;
          prefetch_rows(k + (b * kv_len + next) * kv_stride + g * D, kv_stride, rows, D);
          prefetch_rows(v + (b * kv_len + next) * kv_stride + g * D, kv_stride, rows, D);
        }
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

  // Packs the keys and values of the tile starting at position k0 of the
  // sequence starting at row `row0` (k, v point at the kv head's first
  // column) and clears its gradient accumulators.
  static void pack_key_tile(const float* k, const float* v, int64_t row0, int64_t k0, int64_t seq,
                            int64_t kv_stride, int64_t D, int64_t Dp, KeyTile& kt) {
    kt.k0 = k0;
    kt.nk = seq - kt.k0 < kTile ? seq - kt.k0 : kTile;
    const int64_t np = round_up(kt.nk, kW);
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
  static void add_key_tile_grads(const KeyTile& kt, int64_t row0, int64_t kv_stride, int64_t D,
                                 int64_t Dp, float* dk, float* dv, bool fresh_dk, bool fresh_dv) {
    for (int64_t j = 0; j < kt.nk; ++j) {
      const int64_t off = (row0 + kt.k0 + j) * kv_stride;
      for (int64_t i = 0; i < D; ++i) {
        dk[off + i] = (fresh_dk ? 0.0f : dk[off + i]) + kt.dka[j * Dp + i];
        dv[off + i] = (fresh_dv ? 0.0f : dv[off + i]) + kt.dva[j * Dp + i];
      }
    }
  }

  // Per-thread buffers of one backward work item.
  struct BackwardScratch {
    float* qs;    // [kTile x Dp]  Q tile
    float* dos;   // [kTile x Dp]  dO tile
    float* dqt;   // [kTile x Dp]  dq of the query tile
    float* p;     // [kTile x kTile]
    float* ds;    // [kTile x kTile]
    float* lse2;  // [kTile]
    KeyTile ktiles[kKeyGroup];

    explicit BackwardScratch(int64_t Dp) {
      qs = thread_scratch(static_cast<size_t>(kKeyGroup * 5 * kTile * Dp + 3 * kTile * Dp +
                                              2 * kTile * kTile + 2 * kTile));
      dos = qs + kTile * Dp;
      dqt = dos + kTile * Dp;
      p = dqt + kTile * Dp;
      ds = p + kTile * kTile;
      lse2 = ds + kTile * kTile;
      float* next = lse2 + kTile;
      for (KeyTile& kt : ktiles) {
        kt.ks = next;
        kt.kt = kt.ks + kTile * Dp;
        kt.vt = kt.kt + kTile * Dp;
        kt.dka = kt.vt + kTile * Dp;
        kt.dva = kt.dka + kTile * Dp;
        next = kt.dva + kTile * Dp;
      }
    }
  };

  // Prefetches the q and dO rows of the query tile that backward_item packs
  // after tile qt of head h: the next tile of h, else tile first_tile of the
  // next head below end_head.
  static void prefetch_next_query_tile(const float* q, const float* dout, int64_t b, int64_t h,
                                       int64_t qt, int64_t first_tile, int64_t end_head,
                                       int64_t seq, int64_t q_stride, int64_t D) {
    const int64_t tiles = (seq + kTile - 1) / kTile;
    if (qt + 1 < tiles) {
      ++qt;
    } else if (h + 1 < end_head) {
      ++h;
      qt = first_tile;
    } else {
      return;
    }
    const int64_t q0 = qt * kTile, rows = seq - q0 < kTile ? seq - q0 : kTile;
    const int64_t row0 = (b * seq + q0) * q_stride + h * D;
    prefetch_rows(q + row0, q_stride, rows, D);
    prefetch_rows(dout + row0, q_stride, rows, D);
  }

  // One backward work item, (b, g): every query head of kv head g against
  // every key tile, key group by key group.
  static void backward_item(const float* dout, const float* q, const float* k, const float* v,
                            const float* lse, const float* delta, int64_t b, int64_t g, int64_t seq,
                            int64_t heads, int64_t kv_heads, int64_t D, float* dq, float* dk,
                            float* dv, uint32_t fresh) {
    const int64_t Dp = round_up(D, kW);
    const int64_t group = heads / kv_heads;
    const int64_t q_stride = heads * D, kv_stride = kv_heads * D;
    const int64_t tiles = (seq + kTile - 1) / kTile;
    const int64_t key_groups = (tiles + kKeyGroup - 1) / kKeyGroup;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const bool fresh_dq = (fresh & 1) != 0, fresh_dk = (fresh & 2) != 0,
               fresh_dv = (fresh & 4) != 0;
    BackwardScratch w(Dp);
    for (int64_t kg = 0; kg < key_groups; ++kg) {
      const int64_t kt_begin = kg * kKeyGroup;
      const int64_t kt_end = kt_begin + kKeyGroup < tiles ? kt_begin + kKeyGroup : tiles;
      for (int64_t t = kt_begin; t < kt_end; ++t) {
        pack_key_tile(k + g * D, v + g * D, b * seq, t * kTile, seq, kv_stride, D, Dp,
                      w.ktiles[t - kt_begin]);
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* lse_h = lse + (b * heads + h) * seq;
        const float* delta_h = delta + (b * heads + h) * seq;
        // Each Q/dO tile is packed once and used by every key tile of the group.
        for (int64_t qt = kt_begin; qt < tiles; ++qt) {
          const int64_t q0 = qt * kTile;
          const int64_t M = seq - q0 < kTile ? seq - q0 : kTile;
          const int64_t row0 = (b * seq + q0) * q_stride + h * D;
          pack_rows(q + row0, q_stride, M, D, Dp, w.qs);
          pack_rows(dout + row0, q_stride, M, D, Dp, w.dos);
          prefetch_next_query_tile(q, dout, b, h, qt, kt_begin, (g + 1) * group, seq, q_stride, D);
          for (int64_t r = 0; r < M; ++r) w.lse2[r] = lse_h[q0 + r] * kLog2e;
          const int64_t last = qt < kt_end - 1 ? qt : kt_end - 1;
          for (int64_t t = kt_begin; t <= last; ++t)
            backward_pair(w.ktiles[t - kt_begin], w.qs, w.dos, w.lse2, delta_h + q0, q0, M, Dp,
                          scale, w.p, w.ds, w.dqt, t == kt_begin);
          // The first key group reaches every query tile: a fresh dq row
          // starts from +0 there.
          const bool dq_from_zero = fresh_dq && kg == 0;
          for (int64_t r = 0; r < M; ++r) {
            float* dqr = dq + row0 + r * q_stride;
            const float* src = w.dqt + r * Dp;
            for (int64_t i = 0; i < D; ++i) dqr[i] = (dq_from_zero ? 0.0f : dqr[i]) + src[i];
          }
        }
      }
      for (int64_t t = kt_begin; t < kt_end; ++t) {
        add_key_tile_grads(w.ktiles[t - kt_begin], b * seq, kv_stride, D, Dp, dk + g * D,
                           dv + g * D, fresh_dk, fresh_dv);
      }
    }
  }

  // The tile pairs of the backward pass, after delta = rowsum(dO * O).
  static void backward(const float* dout, const float* q, const float* k, const float* v,
                       const float* lse, const float* delta, int64_t batch, int64_t seq,
                       int64_t heads, int64_t kv_heads, int64_t D, float* dq, float* dk, float* dv,
                       uint32_t fresh) {
    const int64_t items = batch * kv_heads;
    const bool parallel = items > 1 && batch * heads * seq * seq * D >= (int64_t{1} << 19);
#pragma omp parallel for schedule(static, 1) num_threads(num_threads()) if (parallel)
    for (int64_t item = 0; item < items; ++item) {
      backward_item(dout, q, k, v, lse, delta, item / kv_heads, item % kv_heads, seq, heads,
                    kv_heads, D, dq, dk, dv, fresh);
    }
  }
};

}  // namespace remat::cpu::detail
