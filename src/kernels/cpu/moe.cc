// Mixture-of-experts kernels: routing, dispatch into expert-sorted rows, the
// grouped (per-expert) GEMM and the combine back into token order.
//
// Every output element is owned by one thread and summed in a fixed order,
// so results are deterministic; expert ids, offsets and permutations are
// exact small integers stored as floats.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

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
#pragma omp parallel for schedule(static) if (tokens * experts >= detail::kParallelMin)
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> p(experts), g(experts, 0.0f);
    score_row(logits + t * experts, experts, sigmoid, p.data());
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
      for (int64_t e = 0; e < experts; ++e) dl[e] = (fresh_dl ? 0.0f : dl[e]) + p[e] * (g[e] - dot);
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
  for (int64_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int64_t>(offsets[e]);
    const auto end = static_cast<int64_t>(offsets[e + 1]);
    linear_in_out_forward(rows + begin * k, w + e * k * n, end - begin, k, n, out + begin * n);
  }
}

void grouped_linear_backward(const float* dout, const float* rows, const float* offsets,
                             const float* w, int64_t experts, int64_t /*m*/, int64_t k, int64_t n,
                             float* drows, float* dw, uint32_t fresh) {
  // The segments cover every row, so each fresh drows row is written once;
  // each expert's dw is its own, written (zeros without rows) by its segment.
  for (int64_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int64_t>(offsets[e]);
    const auto end = static_cast<int64_t>(offsets[e + 1]);
    linear_in_out_backward(dout + begin * n, rows + begin * k, w + e * k * n, end - begin, k, n,
                           drows == nullptr ? nullptr : drows + begin * k,
                           dw == nullptr ? nullptr : dw + e * k * n, fresh & 0b11);
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
