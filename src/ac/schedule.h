// The schedule: a plan laid out in time. One list of steps (forward, then per
// block recompute + backward, in reverse), each saying which values die right
// after it. The executor runs it; the planner replays it without kernels.
// Because both read this one list, predicted and measured memory agree.
// It also says which backward step writes each parameter gradient first, so
// the executor and the sharded state agree on it whatever the plan's order.
#pragma once

#include <vector>

#include "ac/plan.h"

namespace remat {

struct Step {
  enum class Kind { kForward, kRecompute, kBackward } kind;
  int32_t node;
  // Values released right after this step (their last use).
  std::vector<ValueId> free_after;
  // Backward steps: bit i is set when this is the first step to write the
  // gradient of node.params[i] (trainable parameters only: a buffer gets no
  // gradient). That step's kernel overwrites the gradient (OpBuffers::
  // fresh_grad_params) and later ones accumulate, so no step zeroes it.
  uint32_t fresh_grad_params = 0;
  // Backward steps: bit i is set when node.inputs[i] dies at this step and
  // its buffer becomes its gradient (grad_may_overwrite_input): the kernel
  // overwrites it, and it is released as that gradient, not listed in
  // free_after.
  uint32_t grads_over_inputs = 0;
};

struct Schedule {
  std::vector<Step> steps;
  bool with_backward = true;
  // Per value: the forward pass keeps it for the backward pass.
  std::vector<bool> keep;
};

// with_backward = false: a forward-only schedule (evaluation); every value
// but the loss dies after its last forward use.
Schedule make_schedule(const Program& program, const Plan& plan, bool with_backward);

const char* to_string(Step::Kind kind);

}  // namespace remat
