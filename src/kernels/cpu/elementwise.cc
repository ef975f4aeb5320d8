// Elementwise kernels: SwiGLU gate (silu(a) * b) and the residual add, on
// fp32 operands (kernels.h) and on activations that are bf16 or fp32 each
// (bf16.h's *_act). Both run one body, which reads and writes each operand
// in its own dtype 8 lanes at a time (the SwiGLU gate 16 where the CPU has
// AVX-512: swiglu_impl.h, the same bits): bf16 is widened and rounded in
// registers, so a bf16 call gives the bits of widening its operands, running
// the fp32 kernel and rounding its result, without a pass over scratch.
#include <type_traits>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/operands.h"
#include "kernels/cpu/swiglu_impl.h"

namespace remat::cpu {

namespace {

using detail::AnyIn;
using detail::AnyOut;
using detail::Bf16In;
using detail::Bf16Out;
using detail::F32In;
using detail::F32Out;

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

// The AVX2 lane set of swiglu_impl.h: the operands' own 8-lane loads and
// stores (operands.h).
struct Lanes8 {
  using Reg = __m256;
  static constexpr int64_t kW = 8;
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg exp(Reg x) { return detail::exp256(x); }
  template <class In>
  static Reg load(In x, int64_t i) {
    return x.load(i);
  }
  template <class Out>
  static void store(Out y, int64_t i, Reg v) {
    y.store(i, v);
  }
  template <class In>
  static Reg load_tail(In x, int64_t i, int64_t r) {
    return x.load_tail(i, r);
  }
  template <class Out>
  static void store_tail(Out y, int64_t i, int64_t r, Reg v) {
    y.store_tail(i, r, v);
  }
};

// The SwiGLU gate on 16 lanes where the CPU has AVX-512 (the same bits),
// else on 8.
template <class A, class B, class Out>
void silu_mul_forward_on(A a, B b, int64_t n, Out out) {
  constexpr bool kHas16 = (std::is_same_v<A, F32In> && std::is_same_v<Out, F32Out>) ||
                          (std::is_same_v<A, Bf16In> && std::is_same_v<Out, Bf16Out>);
  if constexpr (kHas16) {
    if (detail::avx512_kernels()) return detail::silu_mul_forward_avx512(a.p, b.p, n, out.p);
  }
  detail::silu_mul_forward_lanes<Lanes8>(a, b, n, out);
}

template <class A, class B>
void silu_mul_backward_on(const float* dout, A a, B b, int64_t n, float* da, float* db,
                          uint32_t fresh) {
  if constexpr (std::is_same_v<A, F32In> || std::is_same_v<A, Bf16In>) {
    if (detail::avx512_kernels())
      return detail::silu_mul_backward_avx512(dout, a.p, b.p, n, da, db, fresh);
  }
  detail::silu_mul_backward_lanes<Lanes8>(dout, a, b, n, da, db, fresh);
}

template <class A, class B, class Out>
void add_forward_on(A a, B b, int64_t n, Out out) {
  detail::by_elementwise_blocks(n, [&](int64_t i0, int64_t i1) {
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
  if (da != nullptr && db != nullptr) {
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      da[i] = (fresh_a ? 0.0f : da[i]) + dout[i];
      db[i] = (fresh_b ? 0.0f : db[i]) + dout[i];
    }
    return;
  }
  float* g = da != nullptr ? da : db;  // the one gradient written, if any
  if (g == nullptr) return;
  const bool fresh_g = da != nullptr ? fresh_a : fresh_b;
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= detail::kParallelMin)
  for (int64_t i = 0; i < n; ++i) g[i] = (fresh_g ? 0.0f : g[i]) + dout[i];
}

}  // namespace remat::cpu
