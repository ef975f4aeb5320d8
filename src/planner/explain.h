// `remat plan --explain`: why the plan keeps or rebuilds each value.
#pragma once

#include <string>

#include "ac/block_memory.h"
#include "planner/planner.h"

namespace remat {

// One row per value inside the blocks that the backward pass needs (layer
// indices folded into '*', with the number of blocks it occurs in): whether
// it is kept or rebuilt, its bytes, what rebuilding it costs (its producer's
// recompute cost, shared by all the producer's outputs), whether it is live
// at the moment of the peak, and its break-even price: cost per byte, the
// price of memory above which keeping it stops paying.
std::string explain_plan(const Program& program, const Plan& plan, const PlannerOptions& planner,
                         const OpCost& cost, const std::string& cost_unit);

}  // namespace remat
