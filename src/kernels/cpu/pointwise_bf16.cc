// RMSNorm and RoPE on bf16 activations (bf16.h): the fp32 kernels
// themselves, run chunk by chunk on operands widened into per-thread
// scratch, their bf16 results rounded from it. Each kernel's arithmetic on an
// element depends only on its row, so chunks of whole rows give the bits of
// one call on whole widened tensors. (The elementwise ops read and round
// bf16 in registers: elementwise.cc.)
#include <algorithm>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"

namespace remat::cpu {

namespace {

// Elements per chunk: three fp32 operands stay in L2, and one chunk is below
// detail::kParallelMin, so a kernel called on it runs on the calling thread
// (the chunks are what the threads share).
constexpr int64_t kChunk = 16384;

// Elements [begin, begin + n) of an operand as fp32, into `dst`.
void copy_widened(ActIn x, int64_t begin, int64_t n, float* dst) {
  if (!x.bf16) {
    std::copy_n(static_cast<const float*>(x.data) + begin, n, dst);
    return;
  }
  const bf16* src = static_cast<const bf16*>(x.data) + begin;
  for (int64_t i = 0; i < n; ++i) dst[i] = from_bf16(src[i]);
}

// `src` into elements [begin, begin + n) of a result, rounded where bf16.
void copy_rounded(const float* src, ActOut y, int64_t begin, int64_t n) {
  if (!y.bf16) {
    std::copy_n(src, n, static_cast<float*>(y.data) + begin);
    return;
  }
  bf16* dst = static_cast<bf16*>(y.data) + begin;
  for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

// The fp32 elements [begin, begin + n) of an operand: in place, or widened
// into `scratch`.
const float* widened(ActIn x, int64_t begin, int64_t n, std::vector<float>& scratch) {
  if (!x.bf16) return static_cast<const float*>(x.data) + begin;
  float* wide = detail::grown(scratch, n);
  copy_widened(x, begin, n, wide);
  return wide;
}

// Where a kernel writes elements [begin, begin + n) of a result: in place,
// or `scratch`, rounded into place by `store` afterwards.
float* result(ActOut y, int64_t begin, int64_t n, std::vector<float>& scratch) {
  if (!y.bf16) return static_cast<float*>(y.data) + begin;
  return detail::grown(scratch, n);
}

void store(ActOut y, int64_t begin, int64_t n, const std::vector<float>& scratch) {
  if (y.bf16) copy_rounded(scratch.data(), y, begin, n);
}

// body(c) for c in [0, chunks), shared out among the threads when the op
// has `elements` >= detail::kParallelMin.
template <typename Body>
void by_chunks(int64_t chunks, int64_t elements, Body body) {
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (elements >= detail::kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) body(c);
}

// Rows per chunk for rows of `width` elements: at least one.
int64_t rows_per_chunk(int64_t width) {
  return std::max<int64_t>(1, kChunk / std::max<int64_t>(1, width));
}

// body(first_row, rows) on chunks of whole rows.
template <typename Body>
void by_rows(int64_t rows, int64_t width, Body body) {
  const int64_t per = rows_per_chunk(width);
  by_chunks((rows + per - 1) / per, rows * width,
            [&](int64_t c) { body(c * per, std::min(per, rows - c * per)); });
}

// Per-thread scratch for a chunk: its operand and its result.
struct Scratch {
  std::vector<float> a, out;
};
thread_local Scratch t_scratch;

}  // namespace

void rmsnorm_forward_act(ActIn x, const float* weight, int64_t rows, int64_t dim, float eps,
                         ActOut out, float* rstd) {
  by_rows(rows, dim, [&](int64_t r0, int64_t n) {
    Scratch& s = t_scratch;
    const int64_t begin = r0 * dim, count = n * dim;
    float* y = result(out, begin, count, s.out);
    rmsnorm_forward(widened(x, begin, count, s.a), weight, n, dim, eps, y, rstd + r0);
    store(out, begin, count, s.out);
  });
}

void rmsnorm_backward_act(const float* dout, ActIn x, const float* weight, const float* rstd,
                          int64_t rows, int64_t dim, float* dx, float* dweight, bool fresh_dweight,
                          bool fresh_dx) {
  if (dx != nullptr) {
    by_rows(rows, dim, [&](int64_t r0, int64_t n) {
      const int64_t begin = r0 * dim;
      rmsnorm_backward(dout + begin, widened(x, begin, n * dim, t_scratch.a), weight, rstd + r0, n,
                       dim, dx + begin, nullptr, fresh_dx ? 0b01 : 0);
    });
  }
  if (dweight == nullptr) return;
  if (!x.bf16) {
    rmsnorm_backward(dout, static_cast<const float*>(x.data), weight, rstd, rows, dim, nullptr,
                     dweight, fresh_dweight ? 0b10 : 0);
    return;
  }
  // rmsnorm_backward's weight gradient (each column sums its rows in row
  // order, in double), reading x in bf16: a row chunk at a time would round
  // the partial sums into dweight.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (dim + kBlock - 1) / kBlock;
  const bf16* xb = static_cast<const bf16*>(x.data);
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (rows * dim >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock;
    const int64_t n = std::min(kBlock, dim - c0);
    double acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* gr = dout + r * dim + c0;
      const bf16* xr = xb + r * dim + c0;
      const float rs = rstd[r];
      for (int64_t i = 0; i < n; ++i)
        acc[i] += static_cast<double>(gr[i] * (from_bf16(xr[i]) * rs));
    }
    for (int64_t i = 0; i < n; ++i)  // fresh: 0.0f + sum, as in rmsnorm_backward
      dweight[c0 + i] = (fresh_dweight ? 0.0f : dweight[c0 + i]) + static_cast<float>(acc[i]);
  }
}

void rope_forward_act(ActIn x, int64_t batch, int64_t seq, int64_t first_position, int64_t heads,
                      int64_t head_dim, double theta, ActOut out) {
  // A chunk is a run of positions from every sequence, gathered into one
  // [batch, n, heads, head_dim] block, so that each position's angles are
  // computed once per call, as in one call on the whole tensor.
  const int64_t width = heads * head_dim;
  const int64_t per = rows_per_chunk(batch * width), chunks = (seq + per - 1) / per;
  by_chunks(chunks, batch * seq * width, [&](int64_t c) {
    Scratch& s = t_scratch;
    const int64_t p0 = c * per, n = std::min(per, seq - p0), count = n * width;
    detail::grown(s.a, batch * count);
    detail::grown(s.out, batch * count);
    for (int64_t b = 0; b < batch; ++b) {
      copy_widened(x, (b * seq + p0) * width, count, s.a.data() + b * count);
    }
    rope_forward_from(s.a.data(), batch, n, first_position + p0, heads, head_dim, theta,
                      s.out.data());
    for (int64_t b = 0; b < batch; ++b) {
      copy_rounded(s.out.data() + b * count, out, (b * seq + p0) * width, count);
    }
  });
}

}  // namespace remat::cpu
