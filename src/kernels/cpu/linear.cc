// Linear layers on OpenBLAS sgemm (row-major, PyTorch weight layout).
//
// Threading: OpenBLAS runs single-threaded and the work is split across the
// OpenMP threads here, each calling sgemm on its own slice of the output. One
// thread pool for the whole engine means no two pools spin against each
// other on the same cores. Rows are cut into chunks that depend only on the
// shape (split_rows), so results are bit-identical for any thread count.
#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// Rows per chunk: a function of the problem's row count only, never of the
// thread count. OpenBLAS's sgemm rounds a row differently depending on the
// row block it falls in (edge tiles of the NN layout take another path), so
// slicing rows by thread count made results depend on the thread count
// (issue 9, finding 14). Fixed chunks, shared out among threads, make every
// row's arithmetic the same whichever thread runs it and however many there
// are. About 16 chunks of at least 64 rows, a multiple of 16: balanced enough
// for a few threads, and large enough that repacking the weight per chunk
// costs little.
int64_t chunk_rows(int64_t total) {
  constexpr int64_t kTargetChunks = 8, kMinRows = 128, kAlign = 16;
  const int64_t rows = (total + kTargetChunks - 1) / kTargetChunks;
  return std::max(kMinRows, (rows + kAlign - 1) / kAlign * kAlign);
}

// Runs body(begin, end) on each fixed chunk of `total` rows, chunks spread
// over the threads; small problems run their chunks on one thread.
template <typename Body>
void split_rows(int64_t total, int64_t work_per_row, Body body) {
  const int64_t rows = chunk_rows(total);
  const int64_t chunks = (total + rows - 1) / rows;
  const int threads = num_threads();
  const bool parallel = threads > 1 && chunks > 1 && total * work_per_row >= (1 << 18);
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * rows;
    body(begin, std::min(total, begin + rows));
  }
}

}  // namespace

void linear_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n, float* y) {
  if (m == 0 || n == 0) return;
  // y[m, n] = x[m, k] @ w[n, k]^T, split over the rows of x.
  split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, n, k, 1.0f, x + r0 * k, k, w, k,
                0.0f, y + r0 * n, n);
  });
}

void linear_backward(const float* dy, const float* x, const float* w, int64_t m, int64_t k,
                     int64_t n, float* dx, float* dw) {
  if (m == 0 || n == 0 || k == 0) return;
  // dx[m, k] += dy[m, n] @ w[n, k], split over rows of dx (skipped when null).
  if (dx != nullptr) {
    split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, k, n, 1.0f, dy + r0 * n, n, w,
                  k, 1.0f, dx + r0 * k, k);
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, n, k, 1.0f, x + r0 * k, k, w, n,
                0.0f, y + r0 * n, n);
  });
}

void linear_in_out_backward(const float* dy, const float* x, const float* w, int64_t m, int64_t k,
                            int64_t n, float* dx, float* dw) {
  if (m == 0 || n == 0 || k == 0) return;
  // dx[m, k] += dy[m, n] @ w[k, n]^T, split over rows of dx.
  if (dx != nullptr) {
    split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, k, n, 1.0f, dy + r0 * n, n, w,
                  n, 1.0f, dx + r0 * k, k);
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
