// The output projection fused with the cross-entropy (kernels.h): the
// logits exist one chunk of rows at a time, in the caller's scratch, so the
// loss head costs chunk x vocab floats instead of rows x vocab kept from the
// forward to the backward (where they become their own gradient). At a 128K
// vocabulary that is gigabytes. The price is one more output GEMM: the
// backward rebuilds each chunk's logits.
//
// Each chunk runs what the unfused head runs on its rows (the projection,
// cross_entropy_add_rows, cross_entropy_backward_inplace), and the loss sums
// the rows in one order across the chunks. Where the GEMM rounds a row alike
// whatever rows share its call (oneDNN), the loss and lse are the unfused
// bits; OpenBLAS rounds a row by the row block it falls in, so there they
// differ in the last bits. dw sums chunk by chunk, in row order, a different
// association than one GEMM over every row.
#include <stdexcept>

#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

void check_chunk(int64_t chunk) {
  if (chunk < 1) throw std::invalid_argument("linear_cross_entropy: chunk must be >= 1");
}

}  // namespace

double linear_cross_entropy_forward(const LossHeadProjection& projection, const int32_t* targets,
                                    int64_t rows, int64_t vocab, int64_t chunk, float* scratch,
                                    float* lse) {
  check_chunk(chunk);
  double loss = 0.0;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t m = rows - r0 < chunk ? rows - r0 : chunk;
    projection.forward(r0, m, scratch);
    cross_entropy_add_rows(scratch, targets + r0, m, vocab, lse + r0, &loss);
  }
  return rows > 0 ? loss / static_cast<double>(rows) : 0.0;
}

void linear_cross_entropy_backward(const LossHeadProjection& projection, const int32_t* targets,
                                   const float* lse, int64_t rows, int64_t vocab, int64_t chunk,
                                   float* scratch, uint32_t fresh) {
  check_chunk(chunk);
  if (rows == 0) {  // no rows: a fresh dw is still the sum of no products
    projection.backward(0, 0, scratch, fresh);
    return;
  }
  const float scale = 1.0f / static_cast<float>(rows);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t m = rows - r0 < chunk ? rows - r0 : chunk;
    projection.forward(r0, m, scratch);
    cross_entropy_backward_inplace(scratch, targets + r0, lse + r0, m, vocab, scale);
    // Each chunk writes its own rows of dx; dw is fresh for the first only.
    projection.backward(r0, m, scratch, (fresh & 1u) | (r0 == 0 ? (fresh & 2u) : 0u));
  }
}

LossHeadProjection fp32_loss_head(const float* x, const float* w, int64_t dim, int64_t vocab,
                                  float* dx, float* dw) {
  return {[=](int64_t r0, int64_t m, float* logits) {
            linear_forward(x + r0 * dim, w, m, dim, vocab, logits);
          },
          [=](int64_t r0, int64_t m, float* dlogits, uint32_t fresh) {
            linear_backward(dlogits, x + r0 * dim, w, m, dim, vocab,
                            dx != nullptr ? dx + r0 * dim : nullptr, dw, fresh);
          }};
}

}  // namespace remat::cpu
