// Human-readable reports of a plan: the log_mm_flops table.
#pragma once

#include <string>

#include "ac/plan.h"

namespace remat {

// One row per distinct (matmul with its layer index generalised to '*',
// shape, decision): FQN, (m x k) x (k x n), FLOPs, how many times it occurs
// in the model, and the decision with its reason. With `with_bytes`, also the
// bytes its output would keep and its FLOPs per kept byte.
std::string format_matmul_table(const Program& program, const Plan& plan, bool with_bytes = false);

// "layers.12.attention.wq" -> "layers.*.attention.wq"
std::string generalize_layer_index(const std::string& fqn);

}  // namespace remat
