// A baseline, not remat's solver: PyTorch's activation_memory_budget as
// torchtitan's memory_budget mode uses it. It picks the tensors saved for
// backward by a knapsack over their bytes, each worth the FLOPs of the op
// that makes it (pointwise ops count none, so they look free to recompute),
// within `fraction` of the bytes "keep everything" saves. It ignores when
// tensors die, gradient buffers, the recompute's working set and the output
// layer; remat runs it only to compare (activation_checkpoint.budget_solver
// = "pytorch_knapsack").
#pragma once

#include "ac/plan.h"

namespace remat {

// Greedy by FLOPs per byte, one of PyTorch's knapsack solvers.
Plan make_pytorch_knapsack_plan(const Program& program, double fraction);

}  // namespace remat
