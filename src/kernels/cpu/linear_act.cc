// The linear layers on bf16 activations with fp32 weights and fp32 output
// gradients (bf16.h): the fp32 GEMM (gemm_fp32.h) on the activation widened
// exactly. y and dx are threaded and chunked as in linear.cc, so each of
// their rows has the fp32 linear's arithmetic on the widened rows; dw sums
// blocks of rows, each widened where its GEMM reads it.
#include <algorithm>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_fp32.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"

namespace remat::cpu {

namespace {

// Rows of x per block that linear_act_backward widens for dw: 512 rows of
// up to 768 columns stay in a core's L2 (1 MiB on Zen 5, 512 KiB on Zen 3
// for the 256-column blocks of the debug models).
constexpr int64_t kDwBlockRows = 512;

// Rows [r0, r0 + rows) and columns [c0, c0 + cols) of x [., k] widened into
// the calling thread's scratch, cols floats a row. The forward's chunk of x
// and dw's blocks share it: a thread runs one of them at a time.
const float* widened_block(const bf16* x, int64_t k, int64_t r0, int64_t rows, int64_t c0,
                           int64_t cols) {
  thread_local std::vector<float> scratch;
  float* out = detail::grown(scratch, rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* src = x + (r0 + r) * k + c0;
    float* dst = out + r * cols;
    for (int64_t j = 0; j < cols; ++j) dst[j] = from_bf16(src[j]);
  }
  return out;
}

CWrite write_of(uint32_t fresh, uint32_t bit) {
  return (fresh & bit) != 0 ? CWrite::kFresh : CWrite::kAccumulate;
}

}  // namespace

void linear_act_forward(ActIn x, const float* w, bool weight_in_out, int64_t m, int64_t k,
                        int64_t n, ActOut y) {
  if (m == 0 || n == 0) return;
  // y[m, n] = x[m, k] @ op(w): w is [n, k] (transposed) or [k, n] (in, out),
  // split over the rows of x as linear_forward / linear_in_out_forward.
  detail::split_rows(m, k * n, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> y32;
    const float* a = x.bf16 ? widened_block(static_cast<const bf16*>(x.data), k, r0, r1 - r0, 0, k)
                            : static_cast<const float*>(x.data) + r0 * k;
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
  const bool widen = x.bf16 && dw != nullptr && m != 0 && n != 0 && k != 0;
  // dx reads dy and w only: the fp32 linear's. So is all of an fp32 x, and
  // an empty product (which writes a fresh gradient's zeros, reading no x).
  const float* x32 = x.bf16 ? nullptr : static_cast<const float*>(x.data);
  if (weight_in_out) {
    linear_in_out_backward(dy, x32, w, m, k, n, dx, widen ? nullptr : dw, fresh);
  } else {
    linear_backward(dy, x32, w, m, k, n, dx, widen ? nullptr : dw, fresh);
  }
  if (!widen) return;
  // dw from bf16 x, summed over blocks of x's rows in block order, each
  // block widened by the thread that reads it into its own scratch, where
  // the GEMM finds it in cache. Widening all of x first (x is [m, k], up to
  // megabytes) cost a pass through memory and, in dw's GEMMs, reads of lines
  // the other core had written: 4-12% on the llama3 debug model's dw.
  // Blocks and chunks depend on the shape only, so bits do not depend on
  // the thread count; they differ from the fp32 linear's single GEMM over
  // all m rows only in where the sum over rows is cut.
  const bf16* xb = static_cast<const bf16*>(x.data);
  const auto block_write = [&](int64_t b0) {
    return b0 == 0 ? write_of(fresh, 2) : CWrite::kAccumulate;
  };
  if (weight_in_out) {
    // dw[k, n] = x^T @ dy: a chunk of dw's rows reads those columns of x.
    detail::split_rows(k, m * n, [&](int64_t r0, int64_t r1) {
      for (int64_t b0 = 0; b0 < m; b0 += kDwBlockRows) {
        const int64_t rows = std::min(kDwBlockRows, m - b0);
        const float* xs = widened_block(xb, k, b0, rows, r0, r1 - r0);
        gemm_fp32(true, false, r1 - r0, n, rows, xs, r1 - r0, dy + b0 * n, n, block_write(b0),
                  dw + r0 * n, n);
      }
    });
  } else if (detail::chunk_rows(n) < n) {
    // dw[n, k] = dy^T @ x in chunks of dw's rows, as the fp32 linear cuts
    // them; each reads every column of x, so a thread widens a block once
    // for its whole run of chunks (n = 768: two chunks a thread on two).
    detail::split_chunk_runs(n, m * k, [&](int64_t r0, int64_t r1, int64_t chunk) {
      for (int64_t b0 = 0; b0 < m; b0 += kDwBlockRows) {
        const int64_t rows = std::min(kDwBlockRows, m - b0);
        const float* xs = widened_block(xb, k, b0, rows, 0, k);
        for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
          const int64_t c1 = std::min(r1, c0 + chunk);
          gemm_fp32(true, false, c1 - c0, k, rows, dy + b0 * n + c0, n, xs, k, block_write(b0),
                    dw + c0 * k, k);
        }
      }
    });
  } else {
    // Too few rows of dw for two chunks (128 or fewer: an MoE router's gate,
    // wk and wv with few kv heads): chunks of its columns instead, so both
    // threads work, each widening only its columns of x.
    detail::split_rows(k, m * n, [&](int64_t c0, int64_t c1) {
      for (int64_t b0 = 0; b0 < m; b0 += kDwBlockRows) {
        const int64_t rows = std::min(kDwBlockRows, m - b0);
        const float* xs = widened_block(xb, k, b0, rows, c0, c1 - c0);
        gemm_fp32(true, false, n, c1 - c0, rows, dy + b0 * n, n, xs, c1 - c0, block_write(b0),
                  dw + c0, k);
      }
    });
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
