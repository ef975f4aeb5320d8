// What the causal attention kernels' forward and backward passes share
// (attention_impl.h gives the design): the tile size, the vector ISA's
// types, prefetching of strided rows, and the products of an aligned
// diagonal tile, which skip its blocks above the diagonal.
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
struct AttentionTiles {
  using Reg = typename V::Reg;
  static constexpr int64_t kW = V::kW;
  static constexpr int64_t kTile = 64;  // queries per tile = keys per tile
  static constexpr float kLog2e = 1.44269504088896341f;
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
};

}  // namespace remat::cpu::detail
