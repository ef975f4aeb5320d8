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

#include "kernels/cpu/attention_backward.h"
#include "kernels/cpu/attention_forward.h"

namespace remat::cpu::detail {

// The two passes over one vector ISA: forward() from attention_forward.h,
// backward() from attention_backward.h.
template <class V>
struct AttentionKernel : AttentionForward<V>, AttentionBackward<V> {};

}  // namespace remat::cpu::detail
