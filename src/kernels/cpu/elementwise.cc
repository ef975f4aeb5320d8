// Elementwise kernels: SwiGLU gate (silu(a) * b) and the residual add, on
// fp32 operands (kernels.h) and on activations that are bf16 or fp32 each
// (bf16.h's *_act). Both run one body, which reads and writes each operand
// in its own dtype 8 lanes at a time: bf16 is widened and rounded in
// registers, so a bf16 call gives the bits of widening its operands, running
// the fp32 kernel and rounding its result, without a pass over scratch.
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/operands.h"

namespace remat::cpu {

namespace {

using detail::AnyIn;
using detail::AnyOut;
using detail::Bf16In;
using detail::Bf16Out;
using detail::F32In;
using detail::F32Out;

// Elementwise loops are split into fixed blocks of 8-float vectors; each
// element's arithmetic is the same whichever thread runs it.
constexpr int64_t kBlock = 4096;

// body(a, b) on two activations, as Bf16In where both are bf16 (the usual
// case under bf16), else as AnyIn.
template <class Body>
void on_inputs(ActIn a, ActIn b, Body body) {
  if (a.bf16 && b.bf16)
    body(Bf16In{static_cast<const bf16*>(a.data)}, Bf16In{static_cast<const bf16*>(b.data)});
  else
    body(AnyIn{a}, AnyIn{b});
}

// body(a, b, out) likewise, with a result: Bf16* where all three are bf16.
template <class Body>
void on_operands(ActIn a, ActIn b, ActOut out, Body body) {
  if (a.bf16 && b.bf16 && out.bf16) {
    body(Bf16In{static_cast<const bf16*>(a.data)}, Bf16In{static_cast<const bf16*>(b.data)},
         Bf16Out{static_cast<bf16*>(out.data)});
  } else {
    body(AnyIn{a}, AnyIn{b}, AnyOut{out});
  }
}

// body(i0, i1) on each fixed block, blocks shared out among the threads.
template <typename Body>
void by_blocks(int64_t n, Body body) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kBlock;
    body(i0, i0 + kBlock < n ? i0 + kBlock : n);
  }
}

// silu(a) = a / (1 + exp(-a)), as PyTorch's CPU kernel computes it.
template <class A, class B, class Out>
void silu_mul_forward_on(A a, B b, int64_t n, Out out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  by_blocks(n, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 va = a.load(i);
      __m256 e = detail::exp256(_mm256_sub_ps(zero, va));
      __m256 silu = _mm256_div_ps(va, _mm256_add_ps(one, e));
      out.store(i, _mm256_mul_ps(silu, b.load(i)));
    }
    for (; i < i1; ++i) {
      const float ai = a.at(i);
      const float e = detail::exp_scalar(-ai);
      out.set(i, (ai / (1.0f + e)) * b.at(i));
    }
  });
}

// With s = sigmoid(a): d silu / da = s * (1 + a * (1 - s)).
template <class A, class B>
void silu_mul_backward_on(const float* dout, A a, B b, int64_t n, float* da, float* db,
                          uint32_t fresh) {
  // A fresh gradient starts from +0 (kernels.h); the branch is the same for
  // every element, so it costs nothing next to the exp and divisions.
  const bool fresh_a = (fresh & 1) != 0, fresh_b = (fresh & 2) != 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  by_blocks(n, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
      __m256 va = a.load(i);
      __m256 vb = b.load(i);
      __m256 g = _mm256_loadu_ps(dout + i);
      __m256 den = _mm256_add_ps(one, detail::exp256(_mm256_sub_ps(zero, va)));
      __m256 s = _mm256_div_ps(one, den);
      __m256 silu = _mm256_div_ps(va, den);
      // s * (1 + a * (1 - s))
      __m256 dsilu = _mm256_mul_ps(s, _mm256_add_ps(one, _mm256_mul_ps(va, _mm256_sub_ps(one, s))));
      const __m256 da0 = fresh_a ? zero : _mm256_loadu_ps(da + i);
      const __m256 db0 = fresh_b ? zero : _mm256_loadu_ps(db + i);
      _mm256_storeu_ps(da + i, _mm256_add_ps(da0, _mm256_mul_ps(_mm256_mul_ps(g, vb), dsilu)));
      _mm256_storeu_ps(db + i, _mm256_add_ps(db0, _mm256_mul_ps(g, silu)));
    }
    for (; i < i1; ++i) {
      const float ai = a.at(i), bi = b.at(i);
      const float den = 1.0f + detail::exp_scalar(-ai);
      const float s = 1.0f / den;
      const float silu = ai / den;
      const float dsilu = s * (1.0f + ai * (1.0f - s));
      da[i] = (fresh_a ? 0.0f : da[i]) + (dout[i] * bi) * dsilu;
      db[i] = (fresh_b ? 0.0f : db[i]) + dout[i] * silu;
    }
  });
}

template <class A, class B, class Out>
void add_forward_on(A a, B b, int64_t n, Out out) {
  by_blocks(n, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) out.store(i, _mm256_add_ps(a.load(i), b.load(i)));
    for (; i < i1; ++i) out.set(i, a.at(i) + b.at(i));
  });
}

}  // namespace

void silu_mul_forward(const float* a, const float* b, int64_t n, float* out) {
  silu_mul_forward_on(F32In{a}, F32In{b}, n, F32Out{out});
}

void silu_mul_backward(const float* dout, const float* a, const float* b, int64_t n, float* da,
                       float* db, uint32_t fresh) {
  silu_mul_backward_on(dout, F32In{a}, F32In{b}, n, da, db, fresh);
}

void silu_mul_forward_act(ActIn a, ActIn b, int64_t n, ActOut out) {
  on_operands(a, b, out, [&](auto x, auto y, auto z) { silu_mul_forward_on(x, y, n, z); });
}

void silu_mul_backward_act(const float* dout, ActIn a, ActIn b, int64_t n, float* da, float* db,
                           uint32_t fresh) {
  on_inputs(a, b, [&](auto x, auto y) { silu_mul_backward_on(dout, x, y, n, da, db, fresh); });
}

void add_forward(const float* a, const float* b, int64_t n, float* out) {
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_forward_act(ActIn a, ActIn b, int64_t n, ActOut out) {
  on_operands(a, b, out, [&](auto x, auto y, auto z) { add_forward_on(x, y, n, z); });
}

void add_backward(const float* dout, int64_t n, float* da, float* db, uint32_t fresh) {
  const int nt = num_threads();
  // g = 0.0f + dout for a fresh gradient: the bits a zeroed buffer would get.
  const bool fresh_a = (fresh & 1) != 0, fresh_b = (fresh & 2) != 0;
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    if (da != nullptr) da[i] = (fresh_a ? 0.0f : da[i]) + dout[i];
    if (db != nullptr) db[i] = (fresh_b ? 0.0f : db[i]) + dout[i];
  }
}

}  // namespace remat::cpu
