// The 16-lane (AVX-512F, BW and VL) instantiation of the SwiGLU gate (swiglu_impl.h).
// Its exp and its bf16 conversions repeat, lane for lane, the AVX2 ones of
// internal.h and bf16.h, so both give the same bits. The gate is bound by
// its exp and divisions, not by memory: on 16 lanes it ran 1.4-1.6x the
// 8-lane forward on Zen 4 (whose AVX-512 is two 256-bit halves; Zen 5 runs
// it full width).
//
// As in attention_avx512.cc, only the code after the target pragma is
// AVX-512: every header it uses is included before it, so their inline
// functions (shared with the AVX2 code of other files) stay AVX2; but
// swiglu_impl.h, whose templates are instantiated here on this file's own
// lane set (internal linkage), so they cannot meet the AVX2 ones either.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/operands.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps(), a self-initialised
// variable, as the unused merge source of their unmasked forms; inlined here,
// -Wmaybe-uninitialized reports it (and at the ASan build's -O1,
// -Wuninitialized). No variable of this file is involved.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/swiglu_impl.h"

namespace remat::cpu::detail {

namespace {

struct Lanes16 {
  using Reg = __m512;
  static constexpr int64_t kW = 16;
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }

  // exp256 (internal.h) on 16 lanes, operation for operation.
  static Reg exp(Reg x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-88.0f), x));
    const Reg fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
    const Reg z = _mm512_mul_ps(x, x);
    Reg y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, z, x);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    // 2^fx; fx = -127 gives exponent bits 0, i.e. 0.0.
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127));
    e = _mm512_slli_epi32(e, 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
  }

  static Reg load(F32In x, int64_t i) { return _mm512_loadu_ps(x.p + i); }
  // load_bf16x8 on 16 lanes: the bf16 bits become the top half of an fp32.
  static Reg load(Bf16In x, int64_t i) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.p + i)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static void store(F32Out y, int64_t i, Reg v) { _mm512_storeu_ps(y.p + i, v); }
  // store_bf16x8 on 16 lanes: round to nearest even, NaN kept quiet.
  static __m256i bf16_bits(Reg v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_epi16(
        _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, rounded, quiet), 16));
  }
  static void store(Bf16Out y, int64_t i, Reg v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.p + i), bf16_bits(v));
  }

  // Tails: masked loads (zeros past r) and stores, no copy (swiglu_impl.h).
  static __mmask16 first(int64_t r) { return static_cast<__mmask16>((1u << r) - 1); }
  static Reg load_tail(F32In x, int64_t i, int64_t r) {
    return _mm512_maskz_loadu_ps(first(r), x.p + i);
  }
  static Reg load_tail(Bf16In x, int64_t i, int64_t r) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(first(r), x.p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static void store_tail(F32Out y, int64_t i, int64_t r, Reg v) {
    _mm512_mask_storeu_ps(y.p + i, first(r), v);
  }
  static void store_tail(Bf16Out y, int64_t i, int64_t r, Reg v) {
    _mm256_mask_storeu_epi16(y.p + i, first(r), bf16_bits(v));
  }
};

}  // namespace

void silu_mul_forward_avx512(const float* a, const float* b, int64_t n, float* out) {
  silu_mul_forward_lanes<Lanes16>(F32In{a}, F32In{b}, n, F32Out{out});
}

void silu_mul_forward_avx512(const bf16* a, const bf16* b, int64_t n, bf16* out) {
  silu_mul_forward_lanes<Lanes16>(Bf16In{a}, Bf16In{b}, n, Bf16Out{out});
}

void silu_mul_backward_avx512(const float* dout, const float* a, const float* b, int64_t n,
                              float* da, float* db, uint32_t fresh) {
  silu_mul_backward_lanes<Lanes16>(dout, F32In{a}, F32In{b}, n, da, db, fresh);
}

void silu_mul_backward_avx512(const float* dout, const bf16* a, const bf16* b, int64_t n, float* da,
                              float* db, uint32_t fresh) {
  silu_mul_backward_lanes<Lanes16>(dout, Bf16In{a}, Bf16In{b}, n, da, db, fresh);
}

}  // namespace remat::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
