// The SwiGLU gate, silu(a) * b, and its backward, written once on a lane
// set L: elementwise.cc instantiates them on 8 lanes (AVX2), and
// swiglu_avx512.cc on 16 (AVX-512F), where the CPU has it. Each element
// goes through the same IEEE operations in the same order on either
// (L::exp is the Cephes polynomial of exp256, operation for operation; a
// ragged tail too, on padded copies): the two give the same bits, so which
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

// silu(a) * b on L's lanes, silu(a) = a / (1 + exp(-a)) as PyTorch's CPU
// kernel computes it.
template <class L>
typename L::Reg silu_mul(typename L::Reg va, typename L::Reg vb) {
  const typename L::Reg e = L::exp(L::sub(L::zero(), va));
  return L::mul(L::div(va, L::add(L::set1(1.0f), e)), vb);
}

// With s = sigmoid(a): d silu / da = s * (1 + a * (1 - s)); da and db come
// in as what to add onto (zeros for a fresh gradient) and go out summed.
template <class L>
void silu_mul_grads(typename L::Reg g, typename L::Reg va, typename L::Reg vb, typename L::Reg* da,
                    typename L::Reg* db) {
  using Reg = typename L::Reg;
  const Reg one = L::set1(1.0f);
  const Reg den = L::add(one, L::exp(L::sub(L::zero(), va)));
  const Reg s = L::div(one, den);
  const Reg silu = L::div(va, den);
  const Reg dsilu = L::mul(s, L::add(one, L::mul(va, L::sub(one, s))));
  *da = L::add(*da, L::mul(L::mul(g, vb), dsilu));
  *db = L::add(*db, L::mul(g, silu));
}

// Elements [i0, i0 + L::kW) of a block run straight from the operands; a
// ragged tail runs the same vector arithmetic on zero-padded copies (not
// scalar code, which the compiler may contract into FMAs where the lanes
// have separate multiplies and adds), so every element has the lanes' bits.
template <class L, class A, class B, class Out>
void silu_mul_forward_lanes(A a, B b, int64_t n, Out out) {
  by_elementwise_blocks(n, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + L::kW <= i1; i += L::kW) L::store(out, i, silu_mul<L>(L::load(a, i), L::load(b, i)));
    if (i == i1) return;
    float ta[L::kW] = {}, tb[L::kW] = {}, to[L::kW];
    for (int64_t j = 0; i + j < i1; ++j) {
      ta[j] = a.at(i + j);
      tb[j] = b.at(i + j);
    }
    L::store(F32Out{to}, 0, silu_mul<L>(L::load(F32In{ta}, 0), L::load(F32In{tb}, 0)));
    for (int64_t j = 0; i + j < i1; ++j) out.set(i + j, to[j]);
  });
}

// fresh: bit 0 da, bit 1 db; a fresh gradient starts from +0 (kernels.h).
template <class L, class A, class B>
void silu_mul_backward_lanes(const float* dout, A a, B b, int64_t n, float* da, float* db,
                             uint32_t fresh) {
  using Reg = typename L::Reg;
  const bool fresh_a = (fresh & 1) != 0, fresh_b = (fresh & 2) != 0;
  by_elementwise_blocks(n, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + L::kW <= i1; i += L::kW) {
      Reg ga = fresh_a ? L::zero() : L::load(F32In{da}, i);
      Reg gb = fresh_b ? L::zero() : L::load(F32In{db}, i);
      silu_mul_grads<L>(L::load(F32In{dout}, i), L::load(a, i), L::load(b, i), &ga, &gb);
      L::store(F32Out{da}, i, ga);
      L::store(F32Out{db}, i, gb);
    }
    if (i == i1) return;
    float tg[L::kW] = {}, ta[L::kW] = {}, tb[L::kW] = {}, tda[L::kW] = {}, tdb[L::kW] = {};
    for (int64_t j = 0; i + j < i1; ++j) {
      tg[j] = dout[i + j];
      ta[j] = a.at(i + j);
      tb[j] = b.at(i + j);
      if (!fresh_a) tda[j] = da[i + j];
      if (!fresh_b) tdb[j] = db[i + j];
    }
    Reg ga = L::load(F32In{tda}, 0), gb = L::load(F32In{tdb}, 0);
    silu_mul_grads<L>(L::load(F32In{tg}, 0), L::load(F32In{ta}, 0), L::load(F32In{tb}, 0), &ga,
                      &gb);
    L::store(F32Out{tda}, 0, ga);
    L::store(F32Out{tdb}, 0, gb);
    for (int64_t j = 0; i + j < i1; ++j) {
      da[i + j] = tda[j];
      db[i + j] = tdb[j];
    }
  });
}

}  // namespace remat::cpu::detail
