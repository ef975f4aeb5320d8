// Token embedding lookup and its scatter-add backward.
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {
void check_tokens(const char* who, const int32_t* tokens, int64_t n_tokens, int64_t vocab) {
  for (int64_t t = 0; t < n_tokens; ++t)
    if (tokens[t] < 0 || tokens[t] >= vocab)
      throw std::out_of_range(std::string(who) + ": token " + std::to_string(tokens[t]) +
                              " at position " + std::to_string(t) +
                              " is outside the vocabulary of " + std::to_string(vocab));
}
}  // namespace

void embedding_forward(const int32_t* tokens, int64_t n_tokens, const float* table, int64_t dim,
                       float* out) {
  const int nt = num_threads();
#pragma omp parallel for schedule(static) \
    num_threads(nt) if (n_tokens * dim >= detail::kParallelMin)
  for (int64_t t = 0; t < n_tokens; ++t)
    std::memcpy(out + t * dim, table + static_cast<int64_t>(tokens[t]) * dim, sizeof(float) * dim);
}

void embedding_backward(const int32_t* tokens, int64_t n_tokens, const float* dout, int64_t dim,
                        int64_t vocab, float* dtable) {
  check_tokens("embedding_backward", tokens, n_tokens, vocab);
  // Parallel over blocks of columns; each column is accumulated over tokens in
  // token order, so the result does not depend on the thread count.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  const int nt = num_threads();
#pragma omp parallel for schedule(static) \
    num_threads(nt) if (n_tokens * dim >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t c1 = c0 + kBlock < dim ? c0 + kBlock : dim;
    for (int64_t t = 0; t < n_tokens; ++t) {
      float* dst = dtable + static_cast<int64_t>(tokens[t]) * dim;
      const float* src = dout + t * dim;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

}  // namespace remat::cpu
