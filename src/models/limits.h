// The sizes remat accepts for a model and a step, checked before any
// program is built or anything allocated (InputError, exit 2, naming the key).
//
// Why these limits: every byte count, FLOP count and their sums over a whole
// schedule are int64 arithmetic; the checks keep each tensor below 2^40
// elements, the parameters below 2^44 and a step's FLOPs below 2^62, so no
// later product or sum can overflow, and a huge value is reported as too
// large instead of wrapping round to a small or negative size. MoE routing
// stores token slots as exact float integers, hence tokens x top_k <= 2^24.
// The estimates are computed in double, which cannot overflow.
#pragma once

#include <cstdint>

#include "models/llama3.h"
#include "models/llama4.h"

namespace remat {

inline constexpr int64_t kMaxLayers = 16384;  // Llama 3 405B has 126

// `moe` is null for a dense model. batch and seq are the step's shape.
void check_model_limits(const TransformerArgs& args, const Llama4Args* moe, int64_t batch,
                        int64_t seq);

}  // namespace remat
