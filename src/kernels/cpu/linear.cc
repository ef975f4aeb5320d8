// Linear layers on OpenBLAS sgemm (row-major, PyTorch weight layout).
//
// Threading: OpenBLAS runs single-threaded and the work is split across the
// OpenMP threads here, each calling sgemm on its own slice of the output. One
// thread pool for the whole engine means no two pools spin against each
// other on the same cores, and each output element is still reduced over K
// in one fixed order, so results are deterministic for a thread count.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// [begin, end) of part `part` of `parts` near-equal slices of `total`.
void slice(int64_t total, int parts, int part, int64_t& begin, int64_t& end) {
  const int64_t base = total / parts, extra = total % parts;
  begin = part * base + std::min<int64_t>(part, extra);
  end = begin + base + (part < extra ? 1 : 0);
}

// Runs body(begin, end) on slices of `total` rows, one per thread; small
// problems stay on one thread.
template <typename Body>
void split_rows(int64_t total, int64_t work_per_row, Body body) {
  const int threads = num_threads();
  if (threads <= 1 || total * work_per_row < (1 << 18) || total < 2 * threads) {
    body(int64_t{0}, total);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int64_t begin = 0, end = 0;
    slice(total, omp_get_num_threads(), omp_get_thread_num(), begin, end);
    if (end > begin) body(begin, end);
  }
}

}  // namespace

void linear_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n, float* y) {
  if (m == 0 || n == 0) return;
  // y[m, n] = x[m, k] @ w[n, k]^T, split over the rows of x.
  split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, n, k, 1.0f, x + r0 * k, k, w,
                k, 0.0f, y + r0 * n, n);
  });
}

void linear_backward(const float* dy, const float* x, const float* w, int64_t m, int64_t k,
                     int64_t n, float* dx, float* dw) {
  if (m == 0 || n == 0 || k == 0) return;
  // dx[m, k] += dy[m, n] @ w[n, k], split over rows of dx (skipped when null).
  if (dx != nullptr) {
    split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, k, n, 1.0f, dy + r0 * n, n,
                  w, k, 1.0f, dx + r0 * k, k);
    });
  }
  // dw[n, k] += dy[m, n]^T @ x[m, k], split over rows of dw (skipped when null).
  if (dw != nullptr) {
    split_rows(n, m * k, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, k, m, 1.0f, dy + r0, n, x, k,
                  1.0f, dw + r0 * k, k);
    });
  }
}

void linear_in_out_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n,
                           float* y) {
  if (m == 0 || n == 0) return;
  split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, n, k, 1.0f, x + r0 * k, k, w,
                n, 0.0f, y + r0 * n, n);
  });
}

void linear_in_out_backward(const float* dy, const float* x, const float* w, int64_t m,
                            int64_t k, int64_t n, float* dx, float* dw) {
  if (m == 0 || n == 0 || k == 0) return;
  // dx[m, k] += dy[m, n] @ w[k, n]^T, split over rows of dx.
  if (dx != nullptr) {
    split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, k, n, 1.0f, dy + r0 * n, n,
                  w, n, 1.0f, dx + r0 * k, k);
    });
  }
  // dw[k, n] += x[m, k]^T @ dy[m, n], split over rows of dw.
  if (dw != nullptr) {
    split_rows(k, m * n, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, n, m, 1.0f, x + r0, k, dy, n,
                  1.0f, dw + r0 * n, n);
    });
  }
}

}  // namespace remat::cpu
