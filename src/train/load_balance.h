// Auxiliary-loss-free MoE load balancing (spec.md §3, torchtitan's
// expert-bias update): before each optimizer step, every MoE layer moves its
// expert_bias towards the under-used experts and resets its token counts.
// The layers are found through the program (the routing ops and their
// expert_bias / tokens_per_expert buffers), not by name.
#pragma once

#include <string>
#include <vector>

#include "runtime/model_state.h"

namespace remat {

// Over all MoE layers, the smallest and the largest share of the routed
// tokens (sum of the counts of the layer) that one expert received.
struct MoeLoad {
  int layers = 0;
  double min_share = 0, max_share = 0;
};
MoeLoad moe_load(const ModelState& state);
// "moe: min 8.1% max 19.4%", or "" for a model without MoE layers.
std::string format_moe_load(const MoeLoad& load);

// delta = coeff * sign(mean(counts) - counts), centred to zero mean;
// expert_bias += delta; counts = 0. Returns the number of MoE layers updated.
int update_expert_bias(ModelState& state, float coeff = 1e-3f);
// Every MoE layer's tokens_per_expert buffer, in program order: data
// parallelism sums them over the ranks before update_expert_bias, so every
// rank moves its bias the same way.
std::vector<Tensor*> expert_counts(ModelState& state);
// counts = 0 without touching the bias: a forward pass that is not training
// (validation) leaves no trace in the next step's update.
void reset_expert_counts(ModelState& state);

}  // namespace remat
