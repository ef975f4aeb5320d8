// Linear layers with bf16 operands (bf16.h), threaded like linear.cc: fixed
// row chunks (detail::split_rows) shared out among the threads, each chunk
// one single-threaded gemm on an operand B prepared once per call.
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/internal.h"

namespace remat::cpu {

namespace {

// C[rows, n] (+)= op(A) @ op(B) with the rows of C cut into fixed chunks:
// op(B) prepared once, each chunk one gemm on its rows of A and C.
void chunked_gemm(bool trans_a, int64_t rows, int64_t n, int64_t k, const bf16* a, int64_t lda,
                  bool trans_b, const bf16* b, int64_t ldb, CWrite write, float* c, int64_t ldc) {
  // The calling thread's buffer, named by a reference: inside the lambda
  // `prepared` would name each worker thread's own instance.
  thread_local PreparedB buffer;
  PreparedB& prepared = buffer;
  prepare_b(bf16_gemm(), trans_b, k, n, b, ldb, prepared);
  detail::split_rows(rows, k * n, [&](int64_t r0, int64_t r1) {
    // Row r of op(A) starts at a + r * lda, or (transposed) at column r.
    const bf16* a_rows = trans_a ? a + r0 : a + r0 * lda;
    gemm_bf16_prepared(trans_a, r1 - r0, a_rows, lda, prepared, write, c + r0 * ldc, ldc);
  });
}

}  // namespace

void linear_bf16_forward(const bf16* x, const bf16* w, bool weight_in_out, int64_t m, int64_t k,
                         int64_t n, void* y, bool y_bf16) {
  if (m == 0 || n == 0) return;
  // y[m, n] = x[m, k] @ op(w): w is [n, k] (transposed) or [k, n] (in, out).
  const int64_t ldw = weight_in_out ? n : k;
  if (!y_bf16) {
    chunked_gemm(false, m, n, k, x, k, !weight_in_out, w, ldw, CWrite::kOverwrite,
                 static_cast<float*>(y), n);
    return;
  }
  thread_local PreparedB buffer;
  PreparedB& prepared = buffer;  // the calling thread's (see chunked_gemm)
  prepare_b(bf16_gemm(), !weight_in_out, k, n, w, ldw, prepared);
  detail::split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    // fp32 accumulators for the chunk, rounded once into the bf16 output.
    thread_local std::vector<float> buffer;
    float* acc = detail::grown(buffer, (r1 - r0) * n);
    gemm_bf16_prepared(false, r1 - r0, x + r0 * k, k, prepared, CWrite::kOverwrite, acc, n);
    // Not narrow_to_bf16: its own team would nest inside this chunk's.
    bf16* out = static_cast<bf16*>(y) + r0 * n;
    for (int64_t i = 0; i < (r1 - r0) * n; ++i) out[i] = to_bf16(acc[i]);
  });
}

void linear_bf16_backward(const bf16* dy, const bf16* x, const bf16* w, bool weight_in_out,
                          int64_t m, int64_t k, int64_t n, float* dx, float* dw, bool fresh_dw,
                          bool fresh_dx) {
  // An empty product is zero, and a fresh gradient is still written with it:
  // dw when there are no rows (an expert without tokens), dx when n = 0.
  if (m == 0 && fresh_dw && dw != nullptr)
    std::memset(dw, 0, sizeof(float) * static_cast<size_t>(k * n));
  if (n == 0 && fresh_dx && dx != nullptr)
    std::memset(dx, 0, sizeof(float) * static_cast<size_t>(m * k));
  if (m == 0 || n == 0 || k == 0) return;
  // dx[m, k] (+)= dy[m, n] @ op(w)^T, split over the rows of dx.
  if (dx != nullptr) {
    chunked_gemm(false, m, k, n, dy, n, weight_in_out, w, weight_in_out ? n : k,
                 fresh_dx ? CWrite::kFresh : CWrite::kAccumulate, dx, k);
  }
  if (dw == nullptr) return;
  const CWrite write = fresh_dw ? CWrite::kFresh : CWrite::kAccumulate;
  if (weight_in_out) {
    // dw[k, n] += x[m, k]^T @ dy[m, n], split over the rows of dw.
    chunked_gemm(true, k, n, m, x, k, false, dy, n, write, dw, n);
  } else {
    // dw[n, k] += dy[m, n]^T @ x[m, k], split over the rows of dw.
    chunked_gemm(true, n, k, m, dy, n, false, x, k, write, dw, k);
  }
}

void grouped_linear_bf16_forward(const bf16* rows, const float* offsets, const bf16* w,
                                 int64_t experts, int64_t k, int64_t n, bf16* out) {
  const detail::DataDependentShapes expert_rows;  // gemm_onednn.h
  for (int64_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int64_t>(offsets[e]);
    const auto end = static_cast<int64_t>(offsets[e + 1]);
    linear_bf16_forward(rows + begin * k, w + e * k * n, /*weight_in_out=*/true, end - begin, k, n,
                        out + begin * n, /*y_bf16=*/true);
  }
}

void grouped_linear_bf16_backward(const bf16* dout, const bf16* rows, const float* offsets,
                                  const bf16* w, int64_t experts, int64_t k, int64_t n,
                                  float* drows, float* dw, bool fresh_dw, bool fresh_drows) {
  const detail::DataDependentShapes expert_rows;  // gemm_onednn.h
  for (int64_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int64_t>(offsets[e]);
    const auto end = static_cast<int64_t>(offsets[e + 1]);
    linear_bf16_backward(dout + begin * n, rows + begin * k, w + e * k * n, /*weight_in_out=*/true,
                         end - begin, k, n, drows == nullptr ? nullptr : drows + begin * k,
                         dw == nullptr ? nullptr : dw + e * k * n, fresh_dw, fresh_drows);
  }
}

}  // namespace remat::cpu
