// Linear layers on the fp32 GEMM (gemm_fp32.h; row-major, PyTorch weight
// layout).
//
// Threading: the GEMM runs single-threaded and the work is split across the
// OpenMP threads here, each calling it on its own slice of the output. One
// thread pool for the whole engine means no two pools spin against each
// other on the same cores. Rows are cut into chunks that depend only on the
// shape (split_rows), so results are bit-identical for any thread count.
//
// A fresh dx or dw (kernels.h) is a CWrite::kFresh write: the GEMM never
// reads the old contents and gives the bits of accumulating into a zeroed
// buffer.
#include <cstring>

#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// Whether a backward has no product to compute. An empty product is zero,
// so a fresh gradient still has to be written: with zeros (dx when n = 0, dw
// when m = 0: an MoE expert that received no tokens).
bool zero_fresh_if_empty(int64_t m, int64_t k, int64_t n, float* dx, float* dw, uint32_t fresh) {
  if (m != 0 && n != 0 && k != 0) return false;
  if (dx != nullptr && (fresh & 1) != 0)
    std::memset(dx, 0, sizeof(float) * static_cast<size_t>(m * k));
  if (dw != nullptr && (fresh & 2) != 0)
    std::memset(dw, 0, sizeof(float) * static_cast<size_t>(n * k));
  return true;
}

CWrite write_of(uint32_t fresh, uint32_t bit) {
  return (fresh & bit) != 0 ? CWrite::kFresh : CWrite::kAccumulate;
}

}  // namespace

void linear_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n, float* y) {
  if (m == 0 || n == 0) return;
  // y[m, n] = x[m, k] @ w[n, k]^T, split over the rows of x.
  detail::split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    gemm_fp32(false, true, r1 - r0, n, k, x + r0 * k, k, w, k, CWrite::kOverwrite, y + r0 * n, n);
  });
}

void linear_backward(const float* dy, const float* x, const float* w, int64_t m, int64_t k,
                     int64_t n, float* dx, float* dw, uint32_t fresh) {
  if (zero_fresh_if_empty(m, k, n, dx, dw, fresh)) return;
  // dw first: dx may be x's own buffer (kernels.h).
  // dw[n, k] += dy[m, n]^T @ x[m, k], split over rows of dw (skipped when null).
  if (dw != nullptr) {
    detail::split_rows(n, m * k, [&](int64_t r0, int64_t r1) {
      gemm_fp32(true, false, r1 - r0, k, m, dy + r0, n, x, k, write_of(fresh, 2), dw + r0 * k, k);
    });
  }
  // dx[m, k] += dy[m, n] @ w[n, k], split over rows of dx (skipped when null).
  if (dx != nullptr) {
    detail::split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
      gemm_fp32(false, false, r1 - r0, k, n, dy + r0 * n, n, w, k, write_of(fresh, 1), dx + r0 * k,
                k);
    });
  }
}

void linear_in_out_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n,
                           float* y) {
  if (m == 0 || n == 0) return;
  detail::split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    gemm_fp32(false, false, r1 - r0, n, k, x + r0 * k, k, w, n, CWrite::kOverwrite, y + r0 * n, n);
  });
}

void linear_in_out_backward(const float* dy, const float* x, const float* w, int64_t m, int64_t k,
                            int64_t n, float* dx, float* dw, uint32_t fresh) {
  if (zero_fresh_if_empty(m, k, n, dx, dw, fresh)) return;
  // dw first: dx may be x's own buffer (kernels.h).
  // dw[k, n] += x[m, k]^T @ dy[m, n], split over rows of dw.
  if (dw != nullptr) {
    detail::split_rows(k, m * n, [&](int64_t r0, int64_t r1) {
      gemm_fp32(true, false, r1 - r0, n, m, x + r0, k, dy, n, write_of(fresh, 2), dw + r0 * n, n);
    });
  }
  // dx[m, k] += dy[m, n] @ w[k, n]^T, split over rows of dx.
  if (dx != nullptr) {
    detail::split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
      gemm_fp32(false, true, r1 - r0, k, n, dy + r0 * n, n, w, n, write_of(fresh, 1), dx + r0 * k,
                k);
    });
  }
}

}  // namespace remat::cpu
