// The output projection fused with the cross-entropy (kernels.h): the
// logits exist one chunk of rows at a time, in the caller's scratch, so the
// loss head costs chunk x vocab floats instead of rows x vocab twice over
// (the logits kept for the backward, then turned into their gradient). At a
// 128K vocabulary that is gigabytes. The price is one more output GEMM: the
// backward recomputes each chunk's logits.
//
// Each chunk runs the unfused kernels on its rows (linear_forward,
// cross_entropy_add_rows, cross_entropy_backward_inplace, linear_backward),
// and the loss sums the rows in one order across the chunks. Where the GEMM
// rounds a row alike whatever rows share its call (oneDNN), the loss and lse
// are the unfused bits; OpenBLAS rounds a row by the row block it falls in,
// so there they differ in the last bits. dw sums chunk by chunk, in row
// order, a different association than one GEMM over every row.
#include <stdexcept>

#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

void check_chunk(int64_t chunk) {
  if (chunk < 1) throw std::invalid_argument("linear_cross_entropy: chunk must be >= 1");
}

}  // namespace

double linear_cross_entropy_forward(const float* x, const float* w, const int32_t* targets,
                                    int64_t rows, int64_t dim, int64_t vocab, int64_t chunk,
                                    float* scratch, float* lse) {
  check_chunk(chunk);
  double loss = 0.0;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t m = rows - r0 < chunk ? rows - r0 : chunk;
    linear_forward(x + r0 * dim, w, m, dim, vocab, scratch);
    cross_entropy_add_rows(scratch, targets + r0, m, vocab, lse + r0, &loss);
  }
  return rows > 0 ? loss / static_cast<double>(rows) : 0.0;
}

void linear_cross_entropy_backward(const float* x, const float* w, const int32_t* targets,
                                   const float* lse, int64_t rows, int64_t dim, int64_t vocab,
                                   int64_t chunk, float* scratch, float* dx, float* dw,
                                   uint32_t fresh) {
  check_chunk(chunk);
  const float scale = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
  if (rows == 0) {  // no rows: a fresh dw is the sum of no products
    linear_backward(nullptr, x, w, 0, dim, vocab, dx, dw, fresh);
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t m = rows - r0 < chunk ? rows - r0 : chunk;
    linear_forward(x + r0 * dim, w, m, dim, vocab, scratch);
    cross_entropy_backward_inplace(scratch, targets + r0, lse + r0, m, vocab, scale);
    // Each chunk writes its own rows of dx; dw is fresh for the first only.
    const uint32_t bits = (fresh & 1u) | (r0 == 0 ? (fresh & 2u) : 0u);
    linear_backward(scratch, x + r0 * dim, w, m, dim, vocab,
                    dx != nullptr ? dx + r0 * dim : nullptr, dw, bits);
  }
}

}  // namespace remat::cpu
