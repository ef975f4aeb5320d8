// The oneDNN paths of gemm_bf16 (bf16.h) and gemm_fp32 (gemm_fp32.h):
// oneDNN's bf16 matmul (brg:avx512_core_bf16 in Debian's libdnnl 2.6) and
// its f32 one, one primitive per shape, created once and cached.
//
// Bits never depend on the thread count: Debian builds oneDNN on the OpenMP
// runtime, whose parallel() runs its body once, sequentially, inside an
// active OpenMP team, but otherwise forks omp_get_max_threads() threads and
// sizes the primitive's work split (K split into partial sums included) by
// that count at creation. Every primitive is therefore created and run with
// the calling thread's OpenMP thread count set to 1, so a call is one
// sequential matmul whose arithmetic depends only on its shape, and the
// linear layers run one call per fixed row chunk, as for the native kernel.
//
// Under REMAT_MAX_ISA=avx2 oneDNN is capped at avx2 as well (its max ISA,
// set before its first primitive), so it runs what an AVX2 CPU would.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/gemm_write.h"

namespace remat::cpu::detail {

// Whether oneDNN offers a bf16 matmul that is not its reference
// implementation on this CPU (false under REMAT_MAX_ISA=avx2).
bool onednn_bf16_available();

// C[m, n] = beta * C + op(A)[m, k] @ op(B)[k, n] (beta 0 or 1) as one
// single-threaded oneDNN matmul; the layouts of gemm_bf16. oneDNN's
// scratchpad is the calling thread's buffer (kernel scratch, outside the
// allocator's books like the native kernel's packing buffers).
void gemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a,
                 int64_t lda, const bf16* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Whether oneDNN offers an f32 matmul that is not its reference
// implementation on this CPU (under the ISA cap too).
bool onednn_f32_available();

// C[m, n] = op(A) @ op(B) written as `write` says, as one single-threaded
// oneDNN f32 matmul; the layouts of gemm_fp32. kFresh overwrites C through
// an eltwise linear post-op (1 * x + 0, which maps -0 to +0): the bits of
// accumulating (the sum post-op) into a zeroed C, without reading C.
void gemm_onednn_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                     int64_t lda, const float* b, int64_t ldb, CWrite write, float* c, int64_t ldc);

// The name of the oneDNN implementation gemm_onednn_f32 runs for a shape
// (its impl_info_str, e.g. "brg:avx512_core"): tests and benchmarks.
std::string onednn_f32_implementation(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                      int64_t lda, int64_t ldb, CWrite write, int64_t ldc);

}  // namespace remat::cpu::detail
