// Mixture-of-experts kernels: routing, dispatch into expert-sorted rows, the
// grouped (per-expert) GEMM and the combine back into token order.
//
// Every output element is owned by one thread and summed in a fixed order,
// so results are deterministic; expert ids, offsets and permutations are
// exact small integers stored as floats.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// fp32 scores of one token's logits row.
void score_row(const float* logits, int64_t experts, bool sigmoid, float* out) {
  if (sigmoid) {
    for (int64_t e = 0; e < experts; ++e) out[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    return;
  }
  float max = logits[0];
  for (int64_t e = 1; e < experts; ++e) max = std::max(max, logits[e]);
  float sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    out[e] = std::exp(logits[e] - max);
    sum += out[e];
  }
  const float inv = 1.0f / sum;
  for (int64_t e = 0; e < experts; ++e) out[e] *= inv;
}

// Expert ids, row offsets and row numbers are carried in fp32 buffers, which
// hold every integer up to 2^24 exactly and not all beyond. check_model_limits
// (models/limits.h) keeps tokens x top_k within it for a user; this is the
// kernels' own guard, so a caller past it fails instead of routing rows wrongly.
constexpr int64_t kMaxExactFloatIndex = int64_t{1} << 24;

void check_exact_indices(const char* who, int64_t rows, int64_t experts) {
  if (rows > kMaxExactFloatIndex || experts > kMaxExactFloatIndex) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(rows) + " rows and " +
                                std::to_string(experts) +
                                " experts; fp32 indices are exact only up to 2^24");
  }
}

// For each (token, slot), the sorted row holding it: the inverse of perm.
std::vector<int64_t> slot_rows(const float* perm, int64_t n) {
  std::vector<int64_t> inv(n);
  for (int64_t r = 0; r < n; ++r) inv[static_cast<int64_t>(perm[r])] = r;
  return inv;
}

// A grouped GEMM runs one parallel region over every expert's pieces: an
// expert holds a few hundred rows, too few to keep the threads busy and
// balanced if each expert's GEMM were split on its own (a fork and join per
// expert, and a 300-row segment cut 128 + 128 + 44 leaves one thread idle).
// Pieces are fixed chunks of each segment (chunk_rows), so which thread runs
// one changes no bit; segments are cut finer than a dense GEMM (8 chunks of
// at least 128 rows, the cut every grouped GEMM has always used), which gives
// the dynamic schedule pieces to balance with.
constexpr int64_t kSegmentChunks = 8;

struct GemmPiece {
  int64_t expert;  // the segment
  int64_t begin;   // row_pieces: first row of the chunk (absolute); weight pieces: of dw[expert]
  int64_t end;
  int64_t work;  // multiply-adds, for the serial cut-off
};

// The fixed row chunks of each expert's segment of rows.
std::vector<GemmPiece> row_pieces(const float* offsets, int64_t experts, int64_t work_per_row) {
  std::vector<GemmPiece> pieces;
  for (int64_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int64_t>(offsets[e]);
    const auto end = static_cast<int64_t>(offsets[e + 1]);
    const int64_t chunk = detail::chunk_rows(end - begin, kSegmentChunks);
    for (int64_t r = begin; r < end; r += chunk) {
      const int64_t r1 = std::min(end, r + chunk);
      pieces.push_back({e, r, r1, (r1 - r) * work_per_row});
    }
  }
  return pieces;
}

// dw[e] (k x n) in fixed chunks of its k rows, for every expert with rows.
std::vector<GemmPiece> weight_pieces(const float* offsets, int64_t experts, int64_t k, int64_t n) {
  std::vector<GemmPiece> pieces;
  const int64_t chunk = detail::chunk_rows(k, kSegmentChunks);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t m = static_cast<int64_t>(offsets[e + 1]) - static_cast<int64_t>(offsets[e]);
    if (m == 0 || n == 0) continue;  // no product: dw[e] keeps its contents
    for (int64_t r = 0; r < k; r += chunk) {
      const int64_t r1 = std::min(k, r + chunk);
      pieces.push_back({e, r, r1, (r1 - r) * m * n});
    }
  }
  return pieces;
}

// A fresh expert weight gradient that no row writes: zeros, as the sum of
// no products.
void zero_experts_without_rows(const float* offsets, int64_t experts, int64_t weight_numel,
                               float* dw) {
  for (int64_t e = 0; e < experts; ++e) {
    if (offsets[e + 1] == offsets[e])
      std::memset(dw + e * weight_numel, 0, sizeof(float) * static_cast<size_t>(weight_numel));
  }
}

template <typename Body>
void run_pieces(const std::vector<GemmPiece>& pieces, Body body) {
  int64_t work = 0;
  for (const GemmPiece& p : pieces) work += p.work;
  const auto count = static_cast<int64_t>(pieces.size());
  const int threads = num_threads();
  const bool parallel = threads > 1 && count > 1 && work >= (1 << 18);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (parallel)
  for (int64_t i = 0; i < count; ++i) body(pieces[i]);
}

}  // namespace

void moe_route_forward(const float* logits, const float* expert_bias, int64_t tokens,
                       int64_t experts, int64_t top_k, bool sigmoid, float* out_scores,
                       float* out_indices, float* counts) {
  check_exact_indices("moe_route_forward", tokens * top_k, experts);
#pragma omp parallel for schedule(static) if (tokens * experts >= detail::kParallelMin)
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> scores(experts);
    std::vector<bool> taken(experts, false);
    score_row(logits + t * experts, experts, sigmoid, scores.data());
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t best = -1;
      float best_value = 0;
      for (int64_t e = 0; e < experts; ++e) {
        if (taken[e]) continue;
        const float biased = scores[e] + expert_bias[e];
        if (best < 0 || biased > best_value) {  // strict: ties keep the lower id
          best = e;
          best_value = biased;
        }
      }
      taken[best] = true;
      out_scores[t * top_k + j] = scores[best];
      out_indices[t * top_k + j] = static_cast<float>(best);
    }
  }
  if (counts != nullptr) {
    for (int64_t i = 0; i < tokens * top_k; ++i) counts[static_cast<int64_t>(out_indices[i])] += 1;
  }
}

void moe_route_backward(const float* dscores, const float* logits, const float* indices,
                        int64_t tokens, int64_t experts, int64_t top_k, bool sigmoid,
                        float* dlogits, uint32_t fresh) {
  const bool fresh_dl = (fresh & 1) != 0;  // each dlogits row is written once
  // One pair of score rows per thread, not per token.
#pragma omp parallel if (tokens * experts >= detail::kParallelMin)
  {
    std::vector<float> p(experts), g(experts);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      score_row(logits + t * experts, experts, sigmoid, p.data());
      std::fill(g.begin(), g.end(), 0.0f);
      for (int64_t j = 0; j < top_k; ++j) {
        g[static_cast<int64_t>(indices[t * top_k + j])] += dscores[t * top_k + j];
      }
      float* dl = dlogits + t * experts;
      if (sigmoid) {
        for (int64_t e = 0; e < experts; ++e)
          dl[e] = (fresh_dl ? 0.0f : dl[e]) + g[e] * p[e] * (1.0f - p[e]);
      } else {
        // softmax Jacobian: dl_e = p_e * (g_e - sum_i p_i g_i)
        float dot = 0;
        for (int64_t e = 0; e < experts; ++e) dot += p[e] * g[e];
        for (int64_t e = 0; e < experts; ++e)
          dl[e] = (fresh_dl ? 0.0f : dl[e]) + p[e] * (g[e] - dot);
      }
    }
  }
}

void moe_dispatch_forward(const float* x, const float* scores, const float* indices, int64_t tokens,
                          int64_t dim, int64_t top_k, int64_t experts, float* rows, float* offsets,
                          float* perm) {
  const int64_t n = tokens * top_k;
  check_exact_indices("moe_dispatch_forward", n, experts);
  // Counting sort by expert, stable in (token, slot) order.
  std::vector<int64_t> next(experts + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++next[static_cast<int64_t>(indices[i]) + 1];
  for (int64_t e = 0; e < experts; ++e) next[e + 1] += next[e];
  for (int64_t e = 0; e <= experts; ++e) offsets[e] = static_cast<float>(next[e]);
  for (int64_t i = 0; i < n; ++i) {
    perm[next[static_cast<int64_t>(indices[i])]++] = static_cast<float>(i);
  }
#pragma omp parallel for schedule(static) if (n * dim >= detail::kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const auto i = static_cast<int64_t>(perm[r]);
    const float* src = x + (i / top_k) * dim;
    const float s = scores[i];
    float* dst = rows + r * dim;
    for (int64_t d = 0; d < dim; ++d) dst[d] = src[d] * s;
  }
}

void moe_dispatch_backward(const float* drows, const float* x, const float* scores,
                           const float* perm, int64_t tokens, int64_t dim, int64_t top_k, float* dx,
                           float* dscores, uint32_t fresh) {
  const bool fresh_dx = (fresh & 1) != 0, fresh_ds = (fresh & 2) != 0;
  const std::vector<int64_t> row_of = slot_rows(perm, tokens * top_k);
#pragma omp parallel for schedule(static) if (tokens * top_k * dim >= detail::kParallelMin)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t i = t * top_k + j;
      const float* dr = drows + row_of[i] * dim;
      dscores[i] = (fresh_ds ? 0.0f : dscores[i]) + detail::dot(dr, x + t * dim, dim);
      const float s = scores[i];
      float* d = dx + t * dim;
      // A fresh dx row starts from +0 at the token's first slot.
      if (fresh_dx && j == 0) {
        for (int64_t c = 0; c < dim; ++c) d[c] = 0.0f + dr[c] * s;
      } else {
        for (int64_t c = 0; c < dim; ++c) d[c] += dr[c] * s;
      }
    }
  }
}

void grouped_linear_forward(const float* rows, const float* offsets, const float* w,
                            int64_t experts, int64_t /*m*/, int64_t k, int64_t n, float* out) {
  const detail::DataDependentShapes expert_rows;  // gemm_onednn.h
  // out[seg e] = rows[seg e] @ w[e], each segment in its fixed row chunks.
  if (n == 0) return;
  const std::vector<GemmPiece> pieces = row_pieces(offsets, experts, k * n);
  run_pieces(pieces, [&](const GemmPiece& p) {
    gemm_fp32(false, false, p.end - p.begin, n, k, rows + p.begin * k, k, w + p.expert * k * n, n,
              CWrite::kOverwrite, out + p.begin * n, n);
  });
}

void grouped_linear_backward(const float* dout, const float* rows, const float* offsets,
                             const float* w, int64_t experts, int64_t /*m*/, int64_t k, int64_t n,
                             float* drows, float* dw, uint32_t fresh) {
  const detail::DataDependentShapes expert_rows;  // gemm_onednn.h
  // drows[seg e] (+)= dout[seg e] @ w[e]^T in the segment's row chunks (the
  // segments cover every row, so a fresh drows has each row overwritten once);
  // dw[e] (+)= rows[seg e]^T @ dout[seg e] in fixed chunks of dw's k rows
  // (a fresh dw overwritten, and zeros for an expert without rows).
  const CWrite write = (fresh & 1) != 0 ? CWrite::kFresh : CWrite::kAccumulate;
  const CWrite dw_write = (fresh & 2) != 0 ? CWrite::kFresh : CWrite::kAccumulate;
  if (dw != nullptr && dw_write == CWrite::kFresh)
    zero_experts_without_rows(offsets, experts, k * n, dw);
  if (n == 0 || k == 0) {  // no product; a fresh drows is still written, with zeros
    if (n == 0 && drows != nullptr && write == CWrite::kFresh)
      std::memset(drows, 0, sizeof(float) * static_cast<size_t>(offsets[experts]) * k);
    return;
  }
  // Every dw piece before any drows piece: a fresh drows may be rows' own
  // buffer (a dying input becomes its gradient: op.cc's
  // grads_over_saved_inputs), and each dw[e] reads all of segment e's rows.
  // Each piece is the same GEMM either way, so the order changes no bit.
  if (dw != nullptr) {
    run_pieces(weight_pieces(offsets, experts, k, n), [&](const GemmPiece& p) {
      const auto seg = static_cast<int64_t>(offsets[p.expert]);
      const int64_t m = static_cast<int64_t>(offsets[p.expert + 1]) - seg;
      gemm_fp32(true, false, p.end - p.begin, n, m, rows + seg * k + p.begin, k, dout + seg * n, n,
                dw_write, dw + p.expert * k * n + p.begin * n, n);
    });
  }
  if (drows != nullptr) {
    run_pieces(row_pieces(offsets, experts, k * n), [&](const GemmPiece& p) {
      gemm_fp32(false, true, p.end - p.begin, k, n, dout + p.begin * n, n, w + p.expert * k * n, n,
                write, drows + p.begin * k, k);
    });
  }
}

void moe_combine_forward(const float* rows, const float* perm, int64_t tokens, int64_t dim,
                         int64_t top_k, float* y) {
  const std::vector<int64_t> row_of = slot_rows(perm, tokens * top_k);
#pragma omp parallel for schedule(static) if (tokens * top_k * dim >= detail::kParallelMin)
  for (int64_t t = 0; t < tokens; ++t) {
    float* out = y + t * dim;
    const float* first = rows + row_of[t * top_k] * dim;
    for (int64_t c = 0; c < dim; ++c) out[c] = first[c];
    for (int64_t j = 1; j < top_k; ++j) {
      const float* r = rows + row_of[t * top_k + j] * dim;
      for (int64_t c = 0; c < dim; ++c) out[c] += r[c];
    }
  }
}

void moe_combine_backward(const float* dy, const float* perm, int64_t tokens, int64_t dim,
                          int64_t top_k, float* drows, uint32_t fresh) {
  const int64_t n = tokens * top_k;
  const bool fresh_rows = (fresh & 1) != 0;  // each row is written once
#pragma omp parallel for schedule(static) if (n * dim >= detail::kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const float* src = dy + (static_cast<int64_t>(perm[r]) / top_k) * dim;
    float* d = drows + r * dim;
    if (fresh_rows) {
      for (int64_t c = 0; c < dim; ++c) d[c] = 0.0f + src[c];
    } else {
      for (int64_t c = 0; c < dim; ++c) d[c] += src[c];
    }
  }
}

// torchtitan's auxiliary-loss-free update, in fp32 and in expert order.
void update_expert_bias(float* expert_bias, float* counts, int64_t experts, float coeff) {
  if (experts == 0) return;
  float sum = 0;
  for (int64_t e = 0; e < experts; ++e) sum += counts[e];
  const float mean = sum / static_cast<float>(experts);
  std::vector<float> delta(experts);
  float delta_sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const float diff = mean - counts[e];
    delta[e] = coeff * static_cast<float>((diff > 0) - (diff < 0));
    delta_sum += delta[e];
  }
  const float delta_mean = delta_sum / static_cast<float>(experts);
  for (int64_t e = 0; e < experts; ++e) {
    expert_bias[e] += delta[e] - delta_mean;
    counts[e] = 0;
  }
}

}  // namespace remat::cpu
