// Linear layers on OpenBLAS sgemm (row-major, PyTorch weight layout).
// OpenBLAS splits only the M and N dimensions across threads, so every output
// element is reduced over K in one fixed order: deterministic for a given
// thread count.
#include <cblas.h>

#include "kernels/cpu/kernels.h"

namespace remat::cpu {

void linear_forward(const float* x, const float* w, int64_t m, int64_t k, int64_t n,
                    float* y) {
  if (m == 0 || n == 0) return;
  // y[m, n] = x[m, k] @ w[n, k]^T
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x, k, w, k, 0.0f,
              y, n);
}

void linear_backward(const float* dy, const float* x, const float* w, int64_t m,
                     int64_t k, int64_t n, float* dx, float* dw) {
  if (m == 0 || n == 0 || k == 0) return;
  // dx[m, k] += dy[m, n] @ w[n, k]   (skipped when dx is null)
  if (dx != nullptr)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1.0f, dy, n, w, k,
                1.0f, dx, k);
  // dw[n, k] += dy[m, n]^T @ x[m, k]  (skipped when dw is null)
  if (dw != nullptr)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1.0f, dy, n, x, k,
                1.0f, dw, k);
}

}  // namespace remat::cpu
