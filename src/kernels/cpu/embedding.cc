// Token embedding lookup and its scatter-add backward.
#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

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
bool bit(const std::vector<uint64_t>& bits, int64_t i) {
  return ((bits[static_cast<size_t>(i / 64)] >> (i % 64)) & 1) != 0;
}
// Whether a row holds only +0.0f (all bits zero: -0.0f and NaN do not count).
bool zero_bits(const float* row, int64_t dim) {
  uint32_t any = 0;
  for (int64_t c = 0; c < dim; ++c) any |= std::bit_cast<uint32_t>(row[c]);
  return any == 0;
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
                        int64_t vocab, float* dtable, uint32_t fresh) {
  check_tokens("embedding_backward", tokens, n_tokens, vocab);
  // Fresh (kernels.h): a row no token reads is zero; the first token to reach
  // a row writes it (0.0f + dout), the next ones add. `first` marks those
  // tokens: one bit per token and per row (small next to the table). A row
  // no token reads is written only when it is not zero already: the table
  // persists across steps and a batch reads few of its rows, so in steady
  // state it mostly is, and reading it costs less than rewriting it. What the
  // buffer holds is checked, not assumed: an all-reduce (data parallel) or a
  // reused arena buffer (ZeRO-3's full gradient) puts anything there.
  const bool fresh_table = (fresh & 1) != 0;
  std::vector<uint64_t> read_rows, first;
  if (fresh_table) {
    read_rows.assign(static_cast<size_t>((vocab + 63) / 64), 0);
    first.assign(static_cast<size_t>((n_tokens + 63) / 64), 0);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int32_t row = tokens[t];
      if (bit(read_rows, row)) continue;
      read_rows[row / 64] |= uint64_t{1} << (row % 64);
      first[t / 64] |= uint64_t{1} << (t % 64);
    }
  }
  const int nt = num_threads();
  if (fresh_table) {
#pragma omp parallel for schedule(static) num_threads(nt) if (vocab * dim >= detail::kParallelMin)
    for (int64_t row = 0; row < vocab; ++row)
      if (!bit(read_rows, row) && !zero_bits(dtable + row * dim, dim))
        std::memset(dtable + row * dim, 0, sizeof(float) * static_cast<size_t>(dim));
  }
  // Parallel over blocks of columns; each column is accumulated over tokens in
  // token order, so the result does not depend on the thread count.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) \
    num_threads(nt) if (n_tokens * dim >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t c1 = c0 + kBlock < dim ? c0 + kBlock : dim;
    for (int64_t t = 0; t < n_tokens; ++t) {
      float* dst = dtable + static_cast<int64_t>(tokens[t]) * dim;
      const float* src = dout + t * dim;
      if (fresh_table && bit(first, t)) {
        for (int64_t c = c0; c < c1; ++c) dst[c] = 0.0f + src[c];
      } else {
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
    }
  }
}

}  // namespace remat::cpu
