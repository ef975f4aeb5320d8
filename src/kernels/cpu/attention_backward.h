// The causal attention kernel's backward pass (attention_impl.h gives the
// design): each probability tile recomputed from q, k and the saved
// log-sum-exp, a work item per (batch, kv head).
#pragma once

#include "kernels/cpu/attention_tiles.h"

namespace remat::cpu::detail {

template <class V>
struct AttentionBackward : AttentionTiles<V> {
  // The shared base's names, which a template does not see unqualified.
  using Tiles = AttentionTiles<V>;
  using Tiles::diagonal_keys_by_lanes;
  using Tiles::diagonal_keys_over_lanes;
  using Tiles::diagonal_lanes_over_keys;
  using Tiles::kLog2e;
  using Tiles::kTile;
  using Tiles::kW;
  using Tiles::min;
  using Tiles::prefetch_rows;
  using Tiles::rows_seen;
  using typename Tiles::Reg;
  // Key tiles held per backward pass over the query tiles: each packed Q/dO
  // tile serves all of them. Up to kKeyGroup, fewer for wide heads
  // (key_group), so the tiles and their gradients stay within about 256 KB.
  static constexpr int64_t kKeyGroup = 4;
  static int64_t key_group(int64_t D) { return D <= 32 ? kKeyGroup : 2; }

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
