// Finite-value checks: a run whose loss or gradients go NaN or infinite must
// stop at that step, say where it happened, and never save such numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/program.h"
#include "runtime/backend.h"

namespace remat {

bool all_finite(const float* data, int64_t n);

// The message of a step whose loss or gradient norm is not finite, naming
// the step, both values and the parameter whose gradient went non-finite
// first in the backward pass (the last one in model order).
// The gradients are read through `backend`.
std::string non_finite_step_message(int64_t step, double loss, double grad_norm,
                                    const Program& program, Backend& backend,
                                    const std::vector<Tensor>& grads);

}  // namespace remat
