// The fp32 GEMM behind the fp32 linear layers (linear.cc, linear_act.cc,
// moe.cc, and the bf16 fallback's gemm): one function, gemm_fp32, whose
// implementation is chosen once per process:
//  - openblas: OpenBLAS sgemm. A fresh write is beta 0, which OpenBLAS
//    implements by zeroing all of C (a memset) before adding the product;
//  - onednn: oneDNN's f32 matmul (brgemm kernels in Debian's libdnnl 2.6),
//    one cached primitive per shape run on one thread, as for bf16
//    (gemm_onednn.h). A fresh write overwrites C through an identity
//    post-op (eltwise linear, 1 * x + 0) that turns -0 into +0 in the
//    kernel's registers: the bits of accumulating into a zeroed C, with no
//    pass over C before or after.
// REMAT_FP32_GEMM=openblas|onednn chooses; unset is onednn where oneDNN's
// f32 matmul is a brgemm kernel (AVX-512 CPUs: OpenBLAS's rate on its
// AVX-512 kernels, 1.7-1.85x it on AVX2 kernels, no memset for fresh
// writes; bench/fp32_gemm.py) and openblas elsewhere (AVX2 only: OpenBLAS
// is 6-11% faster than oneDNN's gemm:jit). onednn
// falls back to OpenBLAS where oneDNN's f32 matmul is only its reference
// implementation (to_string says which runs). Each call runs on the calling
// thread alone, and callers cut rows into fixed chunks (detail::split_rows),
// so bits depend on the shape and the implementation, never on the thread
// count. The two implementations sum over k in their own orders: the
// bit-identities (thread counts, AC modes, fresh against zeroed gradients)
// hold within one implementation.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_write.h"

namespace remat::cpu {

enum class Fp32Gemm { kOpenblas, kOnednn };

// The implementation gemm_fp32 uses in this process (see above); throws
// InputError for a REMAT_FP32_GEMM other than openblas, onednn or unset.
// set_num_threads reads it, so a bad value stops a run before any kernel.
Fp32Gemm fp32_gemm();
const char* to_string(Fp32Gemm gemm);

// Row-major C[m, n] = op(A)[m, k] @ op(B)[k, n], added to C or written
// fresh as `write` says, on the calling thread only. op(A) is A (lda >= k)
// or, with trans_a, the transpose of A stored [k, m] (lda >= m); likewise
// op(B). k = 0 writes zeros (unless accumulating).
void gemm_fp32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
               int64_t lda, const float* b, int64_t ldb, CWrite write, float* c, int64_t ldc);
// The same with a chosen implementation (kOnednn runs oneDNN whatever
// implementation it has).
void gemm_fp32_with(Fp32Gemm gemm, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const float* a, int64_t lda, const float* b, int64_t ldb, CWrite write,
                    float* c, int64_t ldc);

// For tests and the microbenchmarks: fp32_gemm() answers `gemm` while one
// is in scope, so the engine's own layers run on either implementation in
// one process. Process-wide: made and ended where no kernel runs.
class ScopedFp32Gemm {
 public:
  explicit ScopedFp32Gemm(Fp32Gemm gemm);
  ~ScopedFp32Gemm();
  ScopedFp32Gemm(const ScopedFp32Gemm&) = delete;
  ScopedFp32Gemm& operator=(const ScopedFp32Gemm&) = delete;

 private:
  int saved_;
};

}  // namespace remat::cpu
