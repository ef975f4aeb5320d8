// The oneDNN path of gemm_bf16 (bf16.h): oneDNN's bf16 matmul
// (brg:avx512_core_bf16 in Debian's libdnnl 2.6), one primitive per shape,
// created once and cached.
//
// Bits never depend on the thread count: Debian builds oneDNN on the OpenMP
// runtime, whose parallel() runs its body once, sequentially, inside an
// active OpenMP team, but otherwise forks omp_get_max_threads() threads and
// sizes the primitive's work split (K split into partial sums included) by
// that count at creation. Every primitive is therefore created and run with
// the calling thread's OpenMP thread count set to 1, so a call is one
// sequential matmul whose arithmetic depends only on its shape, and the
// linear layers run one call per fixed row chunk, as for the native kernel.
#pragma once

#include <cstdint>

#include "kernels/cpu/bf16.h"

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

}  // namespace remat::cpu::detail
