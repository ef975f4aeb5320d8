// The oneDNN paths of gemm_bf16 (bf16.h) and gemm_fp32 (gemm_fp32.h):
// oneDNN's bf16 matmul (brg:avx512_core_bf16 in Debian's libdnnl 2.6) and
// its f32 one, primitives of a few block shapes, created once and cached.
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
// The primitives are few whatever the shapes asked for (issue 11): one
// primitive per exact shape would JIT-compile (and fault in) new ones
// whenever a new shape came. A call is cut, along M and along K, into
// blocks of a few fixed sizes (next_block below), the last one zero-padded
// up to a multiple of 16 in scratch copies where it is ragged; K blocks add
// into C in order. So a layout takes a dozen M sizes and a dozen K sizes,
// and up to 2^j * 512 for long dimensions: the cut is a function of the
// shape only, so bits stay independent of the thread count and of which
// shapes came before. An MoE expert's row count, new every step, is not cut
// at all but left to run time (DataDependentShapes).
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

// C[m, n] (+)= op(A)[m, k] @ op(B)[k, n] as single-threaded oneDNN matmuls,
// C written as `write` says (gemm_write.h); the layouts of gemm_bf16.
// oneDNN's scratchpad and the padded copies are the calling thread's
// buffers (kernel scratch, outside the allocator's books like the native
// kernel's packing buffers).
void gemm_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a,
                 int64_t lda, const bf16* b, int64_t ldb, CWrite write, float* c, int64_t ldc);

// Whether oneDNN offers an f32 matmul that is not its reference
// implementation on this CPU (under the ISA cap too).
bool onednn_f32_available();

// The same with fp32 operands; the layouts of gemm_fp32. kFresh overwrites
// C through an eltwise linear post-op (1 * x + 0, which maps -0 to +0): the
// bits of accumulating (the sum post-op) into a zeroed C, without reading C.
void gemm_onednn_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                     int64_t lda, const float* b, int64_t ldb, CWrite write, float* c, int64_t ldc);

// The name of the oneDNN implementation gemm_onednn_f32 runs for a block
// shape (its impl_info_str, e.g. "brg:avx512_core"; under DataDependentShapes,
// the one that runs every row count): tests and benchmarks.
std::string onednn_f32_implementation(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                      int64_t lda, int64_t ldb, CWrite write, int64_t ldc);

// Whether oneDNN's f32 matmul runs a brgemm kernel at a fixed 256 x 256 x
// 256 shape, whatever DataDependentShapes scope is open (gemm_fp32's choice:
// made on the first GEMM, which may be an MoE expert's).
bool onednn_f32_is_brgemm();

// The next block gemm_onednn cuts from the `rest` rows (or k-values) of a
// dimension it has not run yet: `size` of them, run as `padded` (size
// rounded up to a multiple of 16, zero-padded, where it is a ragged last
// block). Sizes: 16, 32, .., 128, 192, 256, .., 448 and 512 * 2^j.
struct Block {
  int64_t size, padded;
};
Block next_block(int64_t rest);

// The next K block of a call that reads A along k (not transposed):
// next_block, but never deeper than 512. A deeper block's slice of B
// (k x n: 2 MiB of fp32 at k = 2048, n = 256) no longer fits the L2 that the
// kernel streams it from for every row block. On Zen 5, 2 threads, against
// whole-depth blocks: fp32, the output head's dx (k = vocabulary) 1.2-1.3x,
// the wide model's dx at k = 1024 and 2816 1.0-1.1x (build/fp32_gemm_libraries);
// bf16, the wide model's dx at k = 1024 1.1x (build/gemm_rates). Where A is
// read transposed, oneDNN copies it per call and the depth made no
// difference.
Block next_depth_block(int64_t rest);

// How many primitives gemm_onednn and gemm_onednn_f32 have created in this
// process (tests).
int64_t onednn_primitives_created();

// While one is in scope (process-wide: the grouped expert linears hold it
// around their whole op, and no other op runs meanwhile), the dimension over
// an expert's rows (M where A is the rows, K where A is read transposed, as
// in a weight gradient) is left to run time, so one primitive per layout
// and way of writing C runs every row count, with no padded rows computed
// or copied (where B is read transposed, whole 128-row blocks keep a fixed
// shape first: gemm_onednn.cc says why). The other dimensions are model
// dimensions, whole. (Cut by next_block, an expert's row count new every
// step kept turning up new block shapes, new primitives, JIT code faulted
// in, steps after warm-up.)
class DataDependentShapes {
 public:
  DataDependentShapes();
  ~DataDependentShapes();
  DataDependentShapes(const DataDependentShapes&) = delete;
  DataDependentShapes& operator=(const DataDependentShapes&) = delete;
};
}  // namespace remat::cpu::detail
