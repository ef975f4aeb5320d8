// Causal grouped-query attention, flash-attention style, written once over a
// vector ISA V: keys x queries tiles with an online softmax in the forward
// pass; the backward pass recomputes each probability tile from q, k and the
// saved log-sum-exp. attention.cc instantiates it for AVX2 (V = Avx2),
// attention_avx512.cc for AVX-512 (V = Avx512); kernels.h's entry points
// choose one at run time. Everything here is a template on V, so the two
// instantiations are distinct symbols even though the AVX-512 one is compiled
// for another target.
//
// V provides: Reg, kW (lanes), load/store/set1/zero/add/sub/mul/max,
// fmadd(a, b, c) = a * b + c, fmsub(a, b, c) = a * b - c, exp2 (exactly 0 for
// -inf), keep_from(x, j0, lo, fill) (lanes j0 + i < lo become fill),
// equal_all(a, b), and gemm: C[M x N] (+)= A[M x K] B[K x N] with A(r, k) =
// a[r * ars + k * aks], N a multiple of kW, each element reduced over k in
// order.
//
// Layout: score and probability tiles are transposed, one row per key and
// the queries in the vector lanes. The softmax's running max, sum and
// rescale are then per lane: vertical vector ops down the key rows, with no
// horizontal reduction per query, and the products over keys (p v, and the
// backward's ds k) have the tile's queries as their N = 64 columns, the wide
// micro-kernel, instead of head_dim columns (16 for the debug models). Query
// tiles are packed transposed ([head_dim x queries], lanes padded to a
// multiple of kW with zeros); padding lanes compute finite garbage that is
// never written out and never enters a reduction over queries.
//
// Every tile product goes through V::gemm. Scratch is a few tiles per thread
// (fixed per-thread buffers, independent of the sequence length; the planner
// books none of it, as for the GEMM packing buffers). Accumulators are never
// cleared: the first product into each overwrites it.
//
// Causality: tile pairs above the diagonal are skipped (about half the
// work); within the diagonal tile, key rows past a lane block's last query
// are written as zeros without computing them (they would be masked to zeros
// anyway, and adding +0 to the sums changes no bit), and the rows holding the
// boundary mask key > query. Key rows past the query tile's last query are
// left out of the products altogether (their probabilities are all zero).
//
// Determinism: a forward work item owns one (batch, head, group of query
// tiles): its rows of out and lse. A backward work item owns one (batch, kv
// head): its dk and dv rows and the dq rows of its query heads. Within an item
// the order of every reduction is fixed (over keys: key tile by key tile, in
// key order within a tile; sums of p over even and odd keys of a tile, then
// added), so results do not depend on the thread count at all, and a query's
// results do not depend on which other queries share the call (they do depend
// on V: the ISAs round differently).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/bf16.h"
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
  // tile serves all of them. Up to kKeyGroup, fewer for wide heads
  // (key_group), so the tiles and their gradients stay within about 256 KB.
  static constexpr int64_t kKeyGroup = 4;
  static int64_t key_group(int64_t D) { return D <= 32 ? kKeyGroup : 2; }
  static_assert(kTile % kW == 0);

  static int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

  // Asks for `rows` rows of d floats at src, one every `stride` floats,
  // ahead of their packing. The rows are heads * head_dim floats apart,
  // scattered beyond what the hardware prefetcher follows, and packing them
  // on demand stalled on every row; the current tile's work hides the fetch.
  // Rows are fp32 or bf16 (T): the same lines, half as many for bf16.
  template <class T>
  static void prefetch_rows(const T* src, int64_t stride, int64_t rows, int64_t d) {
    constexpr int64_t kLine = 64 / sizeof(T);  // elements per cache line
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = src + r * stride;
      for (int64_t i = 0; i < d; i += kLine) __builtin_prefetch(row + i);
      __builtin_prefetch(row + d - 1);  // the last line of an unaligned row
    }
  }

  // Key rows of the tile at k0 (nk keys) that some lane of the block of kW
  // queries starting at position qj may see: rows r with k0 + r <= qj + kW - 1.
  static int64_t rows_seen(int64_t qj, int64_t k0, int64_t nk) {
    const int64_t n = qj + kW - k0;
    return n < 0 ? 0 : min(n, nk);
  }

  // An aligned diagonal tile (first key = first query, n keys = n queries):
  // key row block i (rows i * kW ..) is seen by lane blocks c >= i only, so
  // its products skip the blocks above the diagonal (3/8 of the tile's
  // work; the probabilities there are exactly 0, and adding 0 * x changes no
  // bit). Skipped entries of the score tile are never read.

  // C[keys x lanes] = A[keys x K] B[K x lanes], row block i from lane i * kW.
  static void diagonal_keys_by_lanes(int64_t n, int64_t Mp, int64_t K, const float* a,
                                     const float* b, float* c) {
    for (int64_t i0 = 0; i0 < n; i0 += kW)
      V::gemm(min(kW, n - i0), Mp - i0, K, a + i0 * K, K, 1, b + i0, Mp, c + i0 * Mp + i0, Mp,
              false);
  }

  // C[rows x lanes] (+)= A[rows x keys] B[keys x lanes] with A(r, k) =
  // a[r + k * aks], lane block c over its keys < (c + 1) * kW only.
  static void diagonal_lanes_over_keys(int64_t rows, int64_t n, int64_t Mp, const float* a,
                                       int64_t aks, const float* b, float* c, bool accumulate) {
    for (int64_t j0 = 0; j0 < Mp; j0 += kW)
      V::gemm(rows, kW, min(n, j0 + kW), a, 1, aks, b + j0, Mp, c + j0, Mp, accumulate);
  }

  // C[keys x Dp] (+)= A[keys x lanes] B[lanes x Dp] over the tile's n
  // queries, row block i over its lanes >= i * kW only.
  static void diagonal_keys_over_lanes(int64_t n, int64_t Mp, int64_t Dp, const float* a,
                                       const float* b, float* c, bool accumulate) {
    for (int64_t i0 = 0; i0 < n; i0 += kW)
      V::gemm(min(kW, n - i0), Dp, n - i0, a + i0 * Mp + i0, Mp, 1, b + i0 * Dp, Dp, c + i0 * Dp,
              Dp, accumulate);
  }

  // Forward pass state of one query tile, transposed (lane j = query q0 + j).
  // Scores are kept raw (unscaled); p = 2^((s - m) * c) with c = scale *
  // log2(e).
  struct QueryTile {
    float* qt;   // [D x Mp] queries
    float* acc;  // [D x Mp] unnormalised output
    float* m;    // [Mp] running max of raw scores
    float* l;    // [Mp] running sum of p
    int64_t q0;  // first query's position (past + its row in the call)
    int64_t M;   // queries
    int64_t Mp;  // lanes: M rounded up to kW
  };

  // The running max of lane block j0 over the visible scores of st's first
  // `rows` key rows (row stride Mp), in two chains (max is exact: any order
  // gives the same value).
  static Reg block_max(const float* st, int64_t Mp, int64_t j0, int64_t rows, int64_t lo0) {
    const Reg neg_inf = V::set1(-INFINITY);
    Reg mx0 = neg_inf, mx1 = neg_inf;
    int64_t r = 0;
    for (; r + 1 < rows; r += 2) {
      mx0 = V::max(mx0, V::keep_from(V::load(st + r * Mp + j0), j0, lo0 + r, neg_inf));
      mx1 = V::max(mx1, V::keep_from(V::load(st + (r + 1) * Mp + j0), j0, lo0 + r + 1, neg_inf));
    }
    if (r < rows) mx0 = V::max(mx0, V::keep_from(V::load(st + r * Mp + j0), j0, lo0 + r, neg_inf));
    return V::max(mx0, mx1);
  }

  // Forward pass, one (query tile, key tile) pair: st = ks @ qt, then the
  // online softmax update of the tile's running max m, sum l and accumulator
  // (overwritten when first: the key tile at position 0, which every query
  // sees).
  static void forward_pair(const QueryTile& t, const float* ks, const float* vs, int64_t k0,
                           int64_t nk, int64_t D, float c, float* st, bool first) {
    const int64_t Mp = t.Mp;
    // Keys past the tile's last query have p = 0 in every lane.
    const int64_t nke = min(nk, t.q0 + t.M - k0);
    const int64_t lo0 = k0 - t.q0;  // key row r is visible to lanes >= lo0 + r
    const Reg vc = V::set1(c);
    const Reg neg_c = V::set1(-c);
    const Reg zero = V::zero();
    const Reg one = V::set1(1.0f);
    const bool diagonal = k0 == t.q0 && nk == t.M;
    if (diagonal)
      diagonal_keys_by_lanes(nk, Mp, D, ks, t.qt, st);
    else
      V::gemm(nke, Mp, D, ks, D, 1, t.qt, Mp, st, Mp, false);
    for (int64_t j0 = 0; j0 < Mp; j0 += kW) {
      const int64_t rows = rows_seen(t.q0 + j0, k0, nke);
      const Reg m_old = V::load(t.m + j0);
      const Reg m_new = V::max(m_old, block_max(st, Mp, j0, rows, lo0));
      // 0 when m_old = -inf; exactly 1 when the maximum did not move.
      const Reg alpha = V::exp2(V::mul(V::sub(m_old, m_new), vc));
      V::store(t.m + j0, m_new);
      // p = 2^(s * c - m * c), summed over even and odd keys.
      const Reg neg_mc = V::mul(m_new, neg_c);
      auto prob = [&](int64_t r) {
        float* sr = st + r * Mp + j0;
        const Reg p = V::keep_from(V::exp2(V::fmadd(V::load(sr), vc, neg_mc)), j0, lo0 + r, zero);
        V::store(sr, p);
        return p;
      };
      Reg sum0 = zero, sum1 = zero;
      int64_t r = 0;
      for (; r + 1 < rows; r += 2) {
        sum0 = V::add(sum0, prob(r));
        sum1 = V::add(sum1, prob(r + 1));
      }
      if (r < rows) sum0 = V::add(sum0, prob(r++));
      for (; r < nke; ++r) V::store(st + r * Mp + j0, zero);
      V::store(t.l + j0, V::fmadd(V::load(t.l + j0), alpha, V::add(sum0, sum1)));
      // Multiplying by exactly 1 changes no bit: skipped.
      if (!first && !V::equal_all(alpha, one)) {
        for (int64_t d = 0; d < D; ++d) {
          float* ad = t.acc + d * Mp + j0;
          V::store(ad, V::mul(V::load(ad), alpha));
        }
      }
    }
    // acc^T += vs^T @ p^T
    if (diagonal)
      diagonal_lanes_over_keys(D, nk, Mp, vs, D, st, t.acc, !first);
    else
      V::gemm(D, Mp, nke, vs, 1, D, st, Mp, t.acc, Mp, !first);
  }

  // Normalises a finished query tile into its rows of out (from `out`, one
  // row every q_stride elements; fp32, or bf16 rounded once from the fp32
  // result) and their log-sum-exp (from `lse`).
  template <class O>
  static void finish_query_tile(const QueryTile& qt, O* out, int64_t q_stride, int64_t D,
                                float scale, float* lse) {
    for (int64_t j = 0; j < qt.M; ++j) {
      const float inv = 1.0f / qt.l[j];
      O* o = out + j * q_stride;
      for (int64_t i = 0; i < D; ++i) {
        const float y = qt.acc[i * qt.Mp + j] * inv;
        if constexpr (std::is_same_v<O, bf16>) {
          o[i] = to_bf16(y);
        } else {
          o[i] = y;
        }
      }
      lse[j] = static_cast<float>(static_cast<double>(qt.m[j]) * scale +
                                  std::log(static_cast<double>(qt.l[j])));
    }
  }

  // Lays out the query tiles t_begin .. t_end - 1 of a head in scratch
  // starting at `next` (forward packs each as the first key tile reaches it).
  static void start_query_tiles(int64_t seq, int64_t past, int64_t D, int64_t t_begin,
                                int64_t t_end, float* next, QueryTile* qtiles) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      QueryTile& qt = qtiles[t - t_begin];
      qt.q0 = past + t * kTile;
      qt.M = min(seq - t * kTile, kTile);
      qt.Mp = round_up(qt.M, kW);
      qt.qt = next;
      qt.acc = qt.qt + D * qt.Mp;
      qt.m = qt.acc + D * qt.Mp;
      qt.l = qt.m + qt.Mp;
      next = qt.l + qt.Mp;
      for (int64_t j = 0; j < qt.Mp; ++j) {
        qt.m[j] = -INFINITY;
        qt.l[j] = 0.0f;
      }
    }
  }

  // Prefetches what forward's work item `item` packs first: its first
  // query tile and the first K / V tile. Asked for during the last key tile
  // of the item before: with dynamic scheduling the next item often runs on
  // this thread, and when not, the rows wait in the shared cache.
  template <class T>
  static void prefetch_forward_item(const T* q, const T* k, const T* v, int64_t item,
                                    int64_t tile_groups, int64_t heads, int64_t group, int64_t seq,
                                    int64_t kv_len, int64_t q_stride, int64_t kv_stride,
                                    int64_t D) {
    const int64_t tg = tile_groups - 1 - item % tile_groups;
    const int64_t h = (item / tile_groups) % heads;
    const int64_t b = item / (tile_groups * heads);
    const int64_t t = tg * kQueryGroup;
    prefetch_rows(q + (b * seq + t * kTile) * q_stride + h * D, q_stride,
                  min(seq - t * kTile, kTile), D);
    const int64_t off = b * kv_len * kv_stride + h / group * D;
    prefetch_rows(k + off, kv_stride, min(kv_len, kTile), D);
    prefetch_rows(v + off, kv_stride, min(kv_len, kTile), D);
  }

  // With past > 0 the diagonal is no longer tile-aligned: a key tile is
  // skipped for a query tile only when it lies wholly after the tile's last
  // query, and lanes that see none of a tile's keys leave their running max
  // and sum as they were (all their scores are masked). With past = 0 the
  // tiles visited, and their order, are exactly those of the aligned
  // diagonal.
  // q, k, v are fp32 or bf16 (T, widened as they are packed); out is fp32
  // or bf16 (O).
  template <class T, class O>
  static void forward(const T* q, const T* k, const T* v, int64_t batch, int64_t seq, int64_t past,
                      int64_t heads, int64_t kv_heads, int64_t D, O* out, float* lse) {
    const int64_t group = heads / kv_heads;
    const int64_t kv_len = past + seq;
    const int64_t q_stride = heads * D, kv_stride = kv_heads * D;
    const int64_t tiles = (seq + kTile - 1) / kTile;
    const int64_t tile_groups = (tiles + kQueryGroup - 1) / kQueryGroup;
    const int64_t items = batch * heads * tile_groups;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const float c = scale * kLog2e;
    const bool parallel = items > 1 && batch * heads * seq * kv_len * D >= (int64_t{1} << 20);

    // Items are independent (each writes only its own rows of out and lse).
    // Each thread takes a contiguous run of them, whole (batch, head) sets
    // where the count divides: every set costs the same, and a thread then
    // reads and writes the rows of its own tokens only, the rows the GEMMs
    // around attention give it (linear.cc splits them the same way). Handed
    // out one at a time, neighbouring heads' rows, 64 bytes apart, were
    // written by the two cores at once: llama3 debug's attention took 9.4 ms
    // forward and 21.4 ms backward per step on 2 threads, against 8.0 and
    // 19.7 split this way (profile traces, Zen 5). A thread done with its run
    // takes items from the end of the other's (run_items_stealing).
    run_items_stealing(items, parallel, [&](int64_t item) {
      // Later (costlier) query tiles first within each (batch, head).
      const int64_t tg = tile_groups - 1 - item % tile_groups;
      const int64_t h = (item / tile_groups) % heads;
      const int64_t b = item / (tile_groups * heads);
      const int64_t g = h / group;
      const int64_t t_begin = tg * kQueryGroup;
      const int64_t t_end = min(t_begin + kQueryGroup, tiles);

      float* scratch = thread_scratch(static_cast<size_t>(
          kQueryGroup * (2 * kTile * D + 2 * kTile) + 2 * kTile * D + kTile * kTile));
      float* ks = scratch;         // [kTile x D] K tile
      float* vs = ks + kTile * D;  // [kTile x D] V tile
      float* st = vs + kTile * D;  // [kTile x kTile], scores then probabilities
      QueryTile qtiles[kQueryGroup] = {};
      start_query_tiles(seq, past, D, t_begin, t_end, st + kTile * kTile, qtiles);

      // Each K/V tile is packed once and used by every query tile of the
      // group, up to the tile holding the group's last query position.
      const QueryTile& last = qtiles[t_end - 1 - t_begin];
      const int64_t key_tiles = (last.q0 + last.M - 1) / kTile + 1;
      for (int64_t ktile = 0; ktile < key_tiles; ++ktile) {
        const int64_t k0 = ktile * kTile;
        const int64_t nk = min(kv_len - k0, kTile);
        pack_rows(k + (b * kv_len + k0) * kv_stride + g * D, kv_stride, nk, D, D, ks);
        pack_rows(v + (b * kv_len + k0) * kv_stride + g * D, kv_stride, nk, D, D, vs);
        if (ktile + 1 < key_tiles) {
          const int64_t next = k0 + kTile, rows = min(kv_len - next, kTile);
          prefetch_rows(k + (b * kv_len + next) * kv_stride + g * D, kv_stride, rows, D);
          prefetch_rows(v + (b * kv_len + next) * kv_stride + g * D, kv_stride, rows, D);
        }
        if (ktile + 1 == key_tiles && item + 1 < items)
          prefetch_forward_item(q, k, v, item + 1, tile_groups, heads, group, seq, kv_len, q_stride,
                                kv_stride, D);
        for (int64_t t = t_begin; t < t_end; ++t) {
          const QueryTile& qt = qtiles[t - t_begin];
          if (ktile == 0) {
            // Each query tile is fetched during the work of the one before.
            const T* qrows = q + (b * seq + t * kTile) * q_stride + h * D;
            pack_transposed(qrows, q_stride, qt.M, D, D, qt.Mp, qt.qt);
            if (t + 1 < t_end)
              prefetch_rows(qrows + kTile * q_stride, q_stride, qtiles[t + 1 - t_begin].M, D);
          }
          if (k0 <= qt.q0 + qt.M - 1) forward_pair(qt, ks, vs, k0, nk, D, c, st, ktile == 0);
        }
      }

      for (int64_t t = t_begin; t < t_end; ++t) {
        finish_query_tile(qtiles[t - t_begin], out + ((b * seq + t * kTile) * heads + h) * D,
                          q_stride, D, scale, lse + (b * heads + h) * seq + t * kTile);
      }
    });
  }

  // A packed key tile for the backward pass, with its dk and dv accumulators.
  struct KeyTile {
    float* ks;   // [kTile x D]
    float* vs;   // [kTile x D]
    float* dka;  // [kTile x Dp]
    float* dva;  // [kTile x Dp]
    int64_t k0;  // first key position
    int64_t nk;  // keys
  };

  // The packed query tile of one backward step: q and dO both row-major (the
  // right-hand sides of dk and dv) and transposed (of the score products),
  // with lse2 = lse * log2(e) and delta per lane.
  struct BackwardQueries {
    float* qs;     // [kTile x Dp]
    float* dos;    // [kTile x Dp]
    float* qt;     // [D x Mp]
    float* dot;    // [D x Mp]
    float* lse2;   // [Mp]
    float* delta;  // [Mp]
    int64_t q0;
    int64_t M;
    int64_t Mp;
  };

  // Backward pass, one (query tile, key tile) pair, transposed like the
  // forward pass. Accumulates into the key tile's dka, dva (overwritten when
  // first_kv) and into dqt, [D x Mp] (overwritten when first_q).
  static void backward_pair(const KeyTile& kt, const BackwardQueries& w, int64_t D, int64_t Dp,
                            float scale, float* pt, float* dst, float* dqt, bool first_q,
                            bool first_kv) {
    const int64_t nk = kt.nk, Mp = w.Mp;
    const int64_t lo0 = kt.k0 - w.q0;
    const Reg vscale = V::set1(scale);
    const Reg vc = V::set1(scale * kLog2e);
    const Reg zero = V::zero();
    // pt <- raw scores ks @ qt ; dst <- dP^T = vs @ dot
    const bool diagonal = kt.k0 == w.q0 && nk == w.M;
    if (diagonal) {
      diagonal_keys_by_lanes(nk, Mp, D, kt.ks, w.qt, pt);
      diagonal_keys_by_lanes(nk, Mp, D, kt.vs, w.dot, dst);
    } else {
      V::gemm(nk, Mp, D, kt.ks, D, 1, w.qt, Mp, pt, Mp, false);
      V::gemm(nk, Mp, D, kt.vs, D, 1, w.dot, Mp, dst, Mp, false);
    }
    for (int64_t j0 = 0; j0 < Mp; j0 += kW) {
      const int64_t rows = rows_seen(w.q0 + j0, kt.k0, nk);
      const Reg vl = V::load(w.lse2 + j0);
      const Reg vd = V::load(w.delta + j0);
      int64_t r = 0;
      for (; r < rows; ++r) {
        float* pr = pt + r * Mp + j0;
        float* dsr = dst + r * Mp + j0;
        // p = exp(scale * s - lse) = 2^(c * s - lse * log2(e))
        const Reg pj = V::keep_from(V::exp2(V::fmsub(V::load(pr), vc, vl)), j0, lo0 + r, zero);
        V::store(pr, pj);
        // dS = P * (dP - delta) * scale (the scale of both dq and dk)
        V::store(dsr, V::mul(V::mul(V::sub(V::load(dsr), vd), pj), vscale));
      }
      for (; r < nk; ++r) {
        V::store(pt + r * Mp + j0, zero);
        V::store(dst + r * Mp + j0, zero);
      }
    }
    // dva += p @ dos ; dka += ds @ qs (over the tile's M queries, not its
    // padding lanes)
    if (diagonal) {
      diagonal_keys_over_lanes(nk, Mp, Dp, pt, w.dos, kt.dva, !first_kv);
      diagonal_keys_over_lanes(nk, Mp, Dp, dst, w.qs, kt.dka, !first_kv);
    } else {
      V::gemm(nk, Dp, w.M, pt, Mp, 1, w.dos, Dp, kt.dva, Dp, !first_kv);
      V::gemm(nk, Dp, w.M, dst, Mp, 1, w.qs, Dp, kt.dka, Dp, !first_kv);
    }
    if (dq_by_rows(D)) {
      // dq (+)= ds^T @ ks, query block c over its keys < (c + 1) * kW only
      // when diagonal.
      for (int64_t j0 = 0; j0 < w.M; j0 += (diagonal ? kW : w.M)) {
        const int64_t rows = diagonal ? min(kW, w.M - j0) : w.M;
        V::gemm(rows, D, diagonal ? min(nk, j0 + kW) : nk, dst + j0, 1, Mp, kt.ks, D, dqt + j0 * D,
                D, !first_q);
      }
    } else if (diagonal) {  // dq^T (+)= ks^T @ ds
      diagonal_lanes_over_keys(D, nk, Mp, kt.ks, D, dst, dqt, !first_q);
    } else {
      V::gemm(D, Mp, nk, kt.ks, 1, D, dst, Mp, dqt, Mp, !first_q);
    }
  }

  // Whether the backward pass's dq tile is [queries x D] (N = D columns)
  // rather than transposed ([D x lanes], N = the tile's 64 lanes): for wide
  // heads, where D columns are as wide and the queries make 64 rows, not D
  // (measured at D = 128: the transposed product ran 4% slower).
  static bool dq_by_rows(int64_t D) { return D % kW == 0 && D >= 64; }

  // Packs the keys and values of the tile starting at position k0 of the
  // sequence starting at row `row0` (k, v point at the kv head's first
  // column).
  template <class T>
  static void pack_key_tile(const T* k, const T* v, int64_t row0, int64_t k0, int64_t seq,
                            int64_t kv_stride, int64_t D, KeyTile& kt) {
    kt.k0 = k0;
    kt.nk = min(seq - kt.k0, kTile);
    pack_rows(k + (row0 + kt.k0) * kv_stride, kv_stride, kt.nk, D, D, kt.ks);
    pack_rows(v + (row0 + kt.k0) * kv_stride, kv_stride, kt.nk, D, D, kt.vs);
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
    BackwardQueries qw;
    float* dqt;  // [D x kTile]  dq of the query tile (dq_by_rows: [kTile x D])
    float* dqr;  // [kTile x D]   dqt transposed back (not dq_by_rows)
    float* pt;   // [kTile x kTile]
    float* dst;  // [kTile x kTile]
    KeyTile ktiles[kKeyGroup];

    BackwardScratch(int64_t D, int64_t Dp) {
      qw.qs =
          thread_scratch(static_cast<size_t>(key_group(D) * 2 * kTile * (D + Dp) + 2 * kTile * Dp +
                                             4 * D * kTile + 2 * kTile * kTile + 2 * kTile));
      qw.dos = qw.qs + kTile * Dp;
      qw.qt = qw.dos + kTile * Dp;
      qw.dot = qw.qt + D * kTile;
      dqt = qw.dot + D * kTile;
      dqr = dqt + D * kTile;
      pt = dqr + D * kTile;
      dst = pt + kTile * kTile;
      qw.lse2 = dst + kTile * kTile;
      qw.delta = qw.lse2 + kTile;
      float* next = qw.delta + kTile;
      for (int64_t i = 0; i < key_group(D); ++i) {
        KeyTile& kt = ktiles[i];
        kt.ks = next;
        kt.vs = kt.ks + kTile * D;
        kt.dka = kt.vs + kTile * D;
        kt.dva = kt.dka + kTile * Dp;
        next = kt.dva + kTile * Dp;
      }
    }
  };

  // Prefetches the q and dO rows of the query tile that backward_item packs
  // after tile qt of head h: the next tile of h, else tile first_tile of the
  // next head below end_head.
  template <class T>
  static void prefetch_next_query_tile(const T* q, const float* dout, int64_t b, int64_t h,
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
    const int64_t q0 = qt * kTile, rows = min(seq - q0, kTile);
    const int64_t row0 = (b * seq + q0) * q_stride + h * D;
    prefetch_rows(q + row0, q_stride, rows, D);
    prefetch_rows(dout + row0, q_stride, rows, D);
  }

  // One backward work item, (b, g): every query head of kv head g against
  // every key tile, key group by key group.
  template <class T>
  static void backward_item(const float* dout, const T* q, const T* k, const T* v, const float* lse,
                            const float* delta, int64_t b, int64_t g, int64_t seq, int64_t heads,
                            int64_t kv_heads, int64_t D, float* dq, float* dk, float* dv,
                            uint32_t fresh) {
    const int64_t Dp = round_up(D, kW);
    const int64_t group = heads / kv_heads;
    const int64_t q_stride = heads * D, kv_stride = kv_heads * D;
    const int64_t tiles = (seq + kTile - 1) / kTile;
    const int64_t kgroup = key_group(D);
    const int64_t key_groups = (tiles + kgroup - 1) / kgroup;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const bool fresh_dq = (fresh & 1) != 0, fresh_dk = (fresh & 2) != 0,
               fresh_dv = (fresh & 4) != 0;
    BackwardScratch w(D, Dp);
    BackwardQueries& qw = w.qw;
    for (int64_t kg = 0; kg < key_groups; ++kg) {
      const int64_t kt_begin = kg * kgroup;
      const int64_t kt_end = min(kt_begin + kgroup, tiles);
      for (int64_t t = kt_begin; t < kt_end; ++t) {
        pack_key_tile(k + g * D, v + g * D, b * seq, t * kTile, seq, kv_stride, D,
                      w.ktiles[t - kt_begin]);
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* lse_h = lse + (b * heads + h) * seq;
        const float* delta_h = delta + (b * heads + h) * seq;
        // Each Q/dO tile is packed once and used by every key tile of the group.
        for (int64_t qt = kt_begin; qt < tiles; ++qt) {
          qw.q0 = qt * kTile;
          qw.M = min(seq - qw.q0, kTile);
          qw.Mp = round_up(qw.M, kW);
          const int64_t row0 = (b * seq + qw.q0) * q_stride + h * D;
          pack_rows(q + row0, q_stride, qw.M, D, Dp, qw.qs);
          pack_rows(dout + row0, q_stride, qw.M, D, Dp, qw.dos);
          pack_transposed(q + row0, q_stride, qw.M, D, D, qw.Mp, qw.qt);
          pack_transposed(dout + row0, q_stride, qw.M, D, D, qw.Mp, qw.dot);
          prefetch_next_query_tile(q, dout, b, h, qt, kt_begin, (g + 1) * group, seq, q_stride, D);
          for (int64_t j = 0; j < qw.Mp; ++j) {
            qw.lse2[j] = j < qw.M ? lse_h[qw.q0 + j] * kLog2e : 0.0f;
            qw.delta[j] = j < qw.M ? delta_h[qw.q0 + j] : 0.0f;
          }
          const int64_t last = min(qt, kt_end - 1);
          for (int64_t t = kt_begin; t <= last; ++t) {
            // A key tile's first query tile is its diagonal one, of the
            // group's first head.
            backward_pair(w.ktiles[t - kt_begin], qw, D, Dp, scale, w.pt, w.dst, w.dqt,
                          t == kt_begin, h == g * group && qt == t);
          }
          // The first key group reaches every query tile: a fresh dq row
          // starts from +0 there.
          const bool dq_from_zero = fresh_dq && kg == 0;
          // dq's rows [M x D]: dqt itself, or dqt [D x Mp] transposed back
          // (pack_transposed: 8x8 blocks in registers), so that the adds run
          // along rows. A scalar gather down dqt's columns was a seventh of
          // the item's own time in a profile at D = 16.
          const float* tile_rows = w.dqt;
          if (!dq_by_rows(D)) {
            pack_transposed(w.dqt, qw.Mp, D, qw.Mp, qw.Mp, D, w.dqr);
            tile_rows = w.dqr;
          }
          for (int64_t j = 0; j < qw.M; ++j) {
            float* out = dq + row0 + j * q_stride;
            const float* add = tile_rows + j * D;
            for (int64_t i = 0; i < D; ++i) out[i] = (dq_from_zero ? 0.0f : out[i]) + add[i];
          }
        }
      }
      for (int64_t t = kt_begin; t < kt_end; ++t) {
        add_key_tile_grads(w.ktiles[t - kt_begin], b * seq, kv_stride, D, Dp, dk + g * D,
                           dv + g * D, fresh_dk, fresh_dv);
      }
    }
  }

  // The tile pairs of the backward pass, after delta = rowsum(dO * O). q, k
  // and v are fp32 or bf16 (T); dout and the gradients are fp32.
  template <class T>
  static void backward(const float* dout, const T* q, const T* k, const T* v, const float* lse,
                       const float* delta, int64_t batch, int64_t seq, int64_t heads,
                       int64_t kv_heads, int64_t D, float* dq, float* dk, float* dv,
                       uint32_t fresh) {
    const int64_t items = batch * kv_heads;
    const bool parallel = items > 1 && batch * heads * seq * seq * D >= (int64_t{1} << 19);
    // Contiguous runs of items, for the reason forward() gives.
    run_items_stealing(items, parallel, [&](int64_t item) {
      backward_item(dout, q, k, v, lse, delta, item / kv_heads, item % kv_heads, seq, heads,
                    kv_heads, D, dq, dk, dv, fresh);
    });
  }
};

}  // namespace remat::cpu::detail
