// The SwiGLU gate, silu(a) * b, and its backward, written once on a lane
// set L: elementwise.cc instantiates them on 8 lanes (AVX2), and
// swiglu_avx512.cc on 16 (AVX-512F), where the CPU has it. Each element
// goes through the same IEEE operations in the same order on either
// (L::exp is the Cephes polynomial of exp256, operation for operation), and
// the scalar tail through one lane's: the two give the same bits, so which
// one a CPU runs changes no result (tests/kernels/elementwise_test.cc).
//
// L provides: Reg, kW (lanes), set1, zero, add, sub, mul, div, exp, and
// load / store of the operand types of operands.h (F32In, Bf16In, F32Out,
// Bf16Out) and of plain floats.
#pragma once

#include <cstdint>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/operands.h"

namespace remat::cpu::detail {

// Elementwise loops are split into fixed blocks of kBlock floats (a
// multiple of every lane count); each element's arithmetic is the same
// whichever thread runs its block.
constexpr int64_t kElementwiseBlock = 4096;

// body(i0, i1) on each fixed block, blocks shared out among the threads.
template <typename Body>
void by_elementwise_blocks(int64_t n, Body body) {
  const int64_t blocks = (n + kElementwiseBlock - 1) / kElementwiseBlock;
  const int nt = num_threads();
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kElementwiseBlock;
    body(i0, i0 + kElementwiseBlock < n ? i0 + kElementwiseBlock : n);
  }
}

// silu(a) = a / (1 + exp(-a)), as PyTorch's CPU kernel computes it.
template <class L, class A, class B, class Out>
void silu_mul_forward_lanes(A a, B b, int64_t n, Out out) {
  using Reg = typename L::Reg;
  by_elementwise_blocks(n, [&](int64_t i0, int64_t i1) {
    const Reg one = L::set1(1.0f), zero = L::zero();
    int64_t i = i0;
    for (; i + L::kW <= i1; i += L::kW) {
      const Reg va = L::load(a, i);
      const Reg e = L::exp(L::sub(zero, va));
      const Reg silu = L::div(va, L::add(one, e));
      L::store(out, i, L::mul(silu, L::load(b, i)));
    }
    for (; i < i1; ++i) {
      const float ai = a.at(i);
      const float e = exp_scalar(-ai);
      out.set(i, (ai / (1.0f + e)) * b.at(i));
    }
  });
}

// With s = sigmoid(a): d silu / da = s * (1 + a * (1 - s)). fresh: bit 0 da,
// bit 1 db; a fresh gradient starts from +0 (kernels.h). The branch is the
// same for every element, so it costs nothing next to the exp and
// divisions.
template <class L, class A, class B>
void silu_mul_backward_lanes(const float* dout, A a, B b, int64_t n, float* da, float* db,
                             uint32_t fresh) {
  using Reg = typename L::Reg;
  const bool fresh_a = (fresh & 1) != 0, fresh_b = (fresh & 2) != 0;
  by_elementwise_blocks(n, [&](int64_t i0, int64_t i1) {
    const Reg one = L::set1(1.0f), zero = L::zero();
    int64_t i = i0;
    for (; i + L::kW <= i1; i += L::kW) {
      const Reg va = L::load(a, i);
      const Reg vb = L::load(b, i);
      const Reg g = L::load(F32In{dout}, i);
      const Reg den = L::add(one, L::exp(L::sub(zero, va)));
      const Reg s = L::div(one, den);
      const Reg silu = L::div(va, den);
      // s * (1 + a * (1 - s))
      const Reg dsilu = L::mul(s, L::add(one, L::mul(va, L::sub(one, s))));
      const Reg da0 = fresh_a ? zero : L::load(F32In{da}, i);
      const Reg db0 = fresh_b ? zero : L::load(F32In{db}, i);
      L::store(F32Out{da}, i, L::add(da0, L::mul(L::mul(g, vb), dsilu)));
      L::store(F32Out{db}, i, L::add(db0, L::mul(g, silu)));
    }
    for (; i < i1; ++i) {
      const float ai = a.at(i), bi = b.at(i);
      const float den = 1.0f + exp_scalar(-ai);
      const float s = 1.0f / den;
      const float silu = ai / den;
      const float dsilu = s * (1.0f + ai * (1.0f - s));
      da[i] = (fresh_a ? 0.0f : da[i]) + (dout[i] * bi) * dsilu;
      db[i] = (fresh_b ? 0.0f : db[i]) + dout[i] * silu;
    }
  });
}

}  // namespace remat::cpu::detail
