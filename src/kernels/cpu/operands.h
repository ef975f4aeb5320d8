// Operands of the kernels that read and write activations in fp32 or bf16
// (bf16.h's *_act): each read as fp32, 8 lanes at index i, the first r < 8
// of them (load_tail: the other lanes zeros) or element i alone, and each
// result written from fp32 likewise (store_tail: r lanes), rounded in
// registers where it is bf16. A kernel body written once on these types
// gives, instantiated on bf16, the bits of widening its operands, running
// the fp32 instantiation and rounding its results, without a pass over
// scratch. F32* and Bf16* fix the dtype at compile time (the usual
// instantiations); Any* decide per element, for the rare calls whose
// activations mix dtypes (a value the program keeps in fp32).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/bf16.h"

namespace remat::cpu::detail {

// All-ones in lanes 0..r-1 of 8, for maskload / maskstore.
inline __m256i tail_mask8(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

struct F32In {
  const float* p;
  __m256 load(int64_t i) const { return _mm256_loadu_ps(p + i); }
  __m256 load_tail(int64_t i, int64_t r) const { return _mm256_maskload_ps(p + i, tail_mask8(r)); }
  float at(int64_t i) const { return p[i]; }
};
struct Bf16In {
  const bf16* p;
  __m256 load(int64_t i) const { return load_bf16x8(p + i); }
  __m256 load_tail(int64_t i, int64_t r) const {
    bf16 t[8] = {};
    std::memcpy(t, p + i, sizeof(bf16) * static_cast<size_t>(r));
    return load_bf16x8(t);
  }
  float at(int64_t i) const { return from_bf16(p[i]); }
};
struct AnyIn {
  ActIn x;
  __m256 load(int64_t i) const {
    return x.bf16 ? Bf16In{static_cast<const bf16*>(x.data)}.load(i)
                  : F32In{static_cast<const float*>(x.data)}.load(i);
  }
  __m256 load_tail(int64_t i, int64_t r) const {
    return x.bf16 ? Bf16In{static_cast<const bf16*>(x.data)}.load_tail(i, r)
                  : F32In{static_cast<const float*>(x.data)}.load_tail(i, r);
  }
  float at(int64_t i) const {
    return x.bf16 ? Bf16In{static_cast<const bf16*>(x.data)}.at(i)
                  : F32In{static_cast<const float*>(x.data)}.at(i);
  }
};
struct F32Out {
  float* p;
  void store(int64_t i, __m256 v) const { _mm256_storeu_ps(p + i, v); }
  void store_tail(int64_t i, int64_t r, __m256 v) const {
    _mm256_maskstore_ps(p + i, tail_mask8(r), v);
  }
  void set(int64_t i, float v) const { p[i] = v; }
};
struct Bf16Out {
  bf16* p;
  void store(int64_t i, __m256 v) const { store_bf16x8(p + i, v); }
  void store_tail(int64_t i, int64_t r, __m256 v) const {
    bf16 t[8];
    store_bf16x8(t, v);
    std::memcpy(p + i, t, sizeof(bf16) * static_cast<size_t>(r));
  }
  void set(int64_t i, float v) const { p[i] = to_bf16(v); }
};
struct AnyOut {
  ActOut y;
  void store(int64_t i, __m256 v) const {
    if (y.bf16)
      Bf16Out{static_cast<bf16*>(y.data)}.store(i, v);
    else
      F32Out{static_cast<float*>(y.data)}.store(i, v);
  }
  void store_tail(int64_t i, int64_t r, __m256 v) const {
    if (y.bf16)
      Bf16Out{static_cast<bf16*>(y.data)}.store_tail(i, r, v);
    else
      F32Out{static_cast<float*>(y.data)}.store_tail(i, r, v);
  }
  void set(int64_t i, float v) const {
    if (y.bf16)
      Bf16Out{static_cast<bf16*>(y.data)}.set(i, v);
    else
      F32Out{static_cast<float*>(y.data)}.set(i, v);
  }
};

// body(x, y) on one input and one result, each as its fixed-dtype type.
template <class Body>
void on_input_output(ActIn x, ActOut y, Body body) {
  const auto with_input = [&](auto in) {
    if (y.bf16)
      body(in, Bf16Out{static_cast<bf16*>(y.data)});
    else
      body(in, F32Out{static_cast<float*>(y.data)});
  };
  if (x.bf16)
    with_input(Bf16In{static_cast<const bf16*>(x.data)});
  else
    with_input(F32In{static_cast<const float*>(x.data)});
}

// body(x) on one input as its fixed-dtype type.
template <class Body>
void on_input(ActIn x, Body body) {
  if (x.bf16)
    body(Bf16In{static_cast<const bf16*>(x.data)});
  else
    body(F32In{static_cast<const float*>(x.data)});
}

}  // namespace remat::cpu::detail
