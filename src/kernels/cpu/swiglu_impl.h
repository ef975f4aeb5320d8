// The SwiGLU gate, silu(a) * b, and its backward, written once on a lane
// set L: elementwise.cc instantiates them on 8 lanes (AVX2), and
// swiglu_avx512.cc on 16 (AVX-512 F, BW and VL), where the CPU has them.
// Each element goes through the same IEEE operations in the same order on
// either (L::exp is the Cephes polynomial of exp256, operation for
// operation; a ragged tail too, on zero-padded lanes): the two give the
// same bits, so which one a CPU runs changes no result
// (tests/kernels/elementwise_test.cc).
//
// L provides: Reg, kW (lanes), set1, zero, add, sub, mul, div, exp, and
// load / store of the operand types of operands.h (F32In, Bf16In, F32Out,
// Bf16Out), and load_tail(x, i, r) / store_tail(y, i, r, v) of a tail of
// 0 < r < kW elements: lanes r.. load as zeros and are not stored. The
// 16-lane set masks them; it must not go through a stack copy, since
// ASan's fake stack frames (detect_stack_use_after_return) are only 32-byte
// aligned and GCC initialises a 64-byte array with aligned 64-byte stores.
#pragma once

#include <cstdint>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/operands.h"

namespace remat::cpu::detail {

// Elementwise loops are split into fixed blocks of kElementwiseBlock
// floats (a multiple of every lane count); each element's arithmetic is the
// same whichever thread runs its block.
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

// Whole vectors of a block run straight from the operands; a ragged tail
// of r < L::kW elements runs the same vector arithmetic on lanes loaded with
// zeros past r (L::load_tail) and stores only its r lanes (L::store_tail),
// not scalar code, which the compiler may contract into FMAs where the
// lanes have separate multiplies and adds: every element has the lanes'
// bits.
template <class L, class A, class B, class Out>
void silu_mul_forward_lanes(A a, B b, int64_t n, Out out) {
  by_elementwise_blocks(n, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + L::kW <= i1; i += L::kW) L::store(out, i, silu_mul<L>(L::load(a, i), L::load(b, i)));
    if (i == i1) return;
    const int64_t r = i1 - i;
    L::store_tail(out, i, r, silu_mul<L>(L::load_tail(a, i, r), L::load_tail(b, i, r)));
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
    const int64_t r = i1 - i;
    Reg ga = fresh_a ? L::zero() : L::load_tail(F32In{da}, i, r);
    Reg gb = fresh_b ? L::zero() : L::load_tail(F32In{db}, i, r);
    silu_mul_grads<L>(L::load_tail(F32In{dout}, i, r), L::load_tail(a, i, r), L::load_tail(b, i, r),
                      &ga, &gb);
    L::store_tail(F32Out{da}, i, r, ga);
    L::store_tail(F32Out{db}, i, r, gb);
  });
}

}  // namespace remat::cpu::detail
