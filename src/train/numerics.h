// Finite-value checks: a run whose loss or gradients go NaN or infinite must
// stop at that step, say where it happened, and never save such numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/program.h"

namespace remat {

bool all_finite(const float* data, int64_t n);

// The index of the first tensor (in parameter order) holding a NaN or an
// infinity, or -1 if all are finite. Undefined (empty) tensors are skipped.
int64_t first_non_finite(const std::vector<Tensor>& tensors);

// The message of a step whose loss or gradient norm is not finite, naming
// the step, both values and the parameter whose gradient went non-finite
// first in the backward pass (the last one in model order).
std::string non_finite_step_message(int64_t step, double loss, double grad_norm,
                                    const Program& program, const std::vector<Tensor>& grads);

}  // namespace remat
