// How a GEMM writes its output C: shared by the fp32 GEMM (gemm_fp32.h) and
// the bf16 ones (bf16.h).
#pragma once

namespace remat::cpu {

// C = product (beta 0), C += product (beta 1), or fresh: the bits C +=
// product gives on a zeroed C, without reading C (kernels.h's fresh
// gradients). Not always beta 0's bits: a kernel may leave -0 where a sum
// is zero or a tiny negative flushed to zero, which 0 + -0 turns into +0.
enum class CWrite { kOverwrite, kAccumulate, kFresh };

}  // namespace remat::cpu
