// The linear layers on bf16 activations with fp32 weights and fp32 output
// gradients (bf16.h): the fp32 GEMM (gemm_fp32.h) on the activation widened exactly,
// threaded and chunked as linear.cc, so each row's arithmetic is the fp32
// linear's on the widened rows.
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// Rows [r0, r1) of x [m, k] as fp32: in place, or widened into `scratch`.
const float* rows_fp32(ActIn x, int64_t k, int64_t r0, int64_t r1, std::vector<float>& scratch) {
  if (!x.bf16) return static_cast<const float*>(x.data) + r0 * k;
  const bf16* src = static_cast<const bf16*>(x.data) + r0 * k;
  float* wide = detail::grown(scratch, (r1 - r0) * k);
  for (int64_t i = 0; i < (r1 - r0) * k; ++i) wide[i] = from_bf16(src[i]);
  return wide;
}

}  // namespace

void linear_act_forward(ActIn x, const float* w, bool weight_in_out, int64_t m, int64_t k,
                        int64_t n, ActOut y) {
  if (m == 0 || n == 0) return;
  // y[m, n] = x[m, k] @ op(w): w is [n, k] (transposed) or [k, n] (in, out),
  // split over the rows of x as linear_forward / linear_in_out_forward.
  detail::split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> x32, y32;
    const float* a = rows_fp32(x, k, r0, r1, x32);
    float* c = static_cast<float*>(y.data) + r0 * n;
    if (y.bf16) {  // fp32 results for the chunk, rounded once into the output
      c = detail::grown(y32, (r1 - r0) * n);
    }
    gemm_fp32(false, !weight_in_out, r1 - r0, n, k, a, k, w, weight_in_out ? n : k,
              CWrite::kOverwrite, c, n);
    if (!y.bf16) return;
    bf16* out = static_cast<bf16*>(y.data) + r0 * n;
    for (int64_t i = 0; i < (r1 - r0) * n; ++i) out[i] = to_bf16(y32[i]);
  });
}

void linear_act_backward(const float* dy, ActIn x, const float* w, bool weight_in_out, int64_t m,
                         int64_t k, int64_t n, float* dx, float* dw, uint32_t fresh) {
  // dx reads dy and w only; dw reads x, widened once for the whole call (its
  // GEMMs are split over the rows of dw, each reading every row of x).
  const float* x32 = nullptr;
  thread_local std::vector<float> wide;
  if (dw != nullptr && x.bf16) {
    float* x_wide = detail::grown(wide, m * k);
    widen_from_bf16(static_cast<const bf16*>(x.data), m * k, x_wide);
    x32 = x_wide;
  } else if (dw != nullptr) {
    x32 = static_cast<const float*>(x.data);
  }
  if (weight_in_out) {
    linear_in_out_backward(dy, x32, w, m, k, n, dx, dw, fresh);
  } else {
    linear_backward(dy, x32, w, m, k, n, dx, dw, fresh);
  }
}

void grouped_linear_act_forward(const bf16* rows, const float* offsets, const float* w,
                                int64_t experts, int64_t k, int64_t n, bf16* out) {
  const detail::DataDependentShapes expert_rows;  // gemm_onednn.h
  for (int64_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int64_t>(offsets[e]);
    const auto end = static_cast<int64_t>(offsets[e + 1]);
    linear_act_forward({rows + begin * k, true}, w + e * k * n, /*weight_in_out=*/true, end - begin,
                       k, n, {out + begin * n, true});
  }
}

void grouped_linear_act_backward(const float* dout, const bf16* rows, const float* offsets,
                                 const float* w, int64_t experts, int64_t k, int64_t n,
                                 float* drows, float* dw, uint32_t fresh) {
  const detail::DataDependentShapes expert_rows;  // gemm_onednn.h
  // The segments cover every row, so each fresh drows row is written once;
  // each expert's dw is its own, written (zeros without rows) by its segment.
  for (int64_t e = 0; e < experts; ++e) {
    const auto begin = static_cast<int64_t>(offsets[e]);
    const auto end = static_cast<int64_t>(offsets[e + 1]);
    linear_act_backward(dout + begin * n, {rows + begin * k, true}, w + e * k * n,
                        /*weight_in_out=*/true, end - begin, k, n,
                        drows == nullptr ? nullptr : drows + begin * k,
                        dw == nullptr ? nullptr : dw + e * k * n, fresh & 0b11);
  }
}

}  // namespace remat::cpu
