// The causal attention kernel's forward pass (attention_impl.h gives the
// design): query tiles against key tiles with an online softmax, a work
// item per (batch, head, group of query tiles).
#pragma once

#include "kernels/cpu/attention_tiles.h"

namespace remat::cpu::detail {

template <class V>
struct AttentionForward : AttentionTiles<V> {
  // The shared base's names, which a template does not see unqualified.
  using Tiles = AttentionTiles<V>;
  using Tiles::diagonal_keys_by_lanes;
  using Tiles::diagonal_lanes_over_keys;
  using Tiles::kLog2e;
  using Tiles::kTile;
  using Tiles::kW;
  using Tiles::min;
  using Tiles::prefetch_rows;
  using Tiles::rows_seen;
  using typename Tiles::Reg;
  // Query tiles per forward work item: each packed K/V tile serves all of them.
  static constexpr int64_t kQueryGroup = 4;

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
};

}  // namespace remat::cpu::detail
