// Checkpoints: model weights (torchtitan FQNs) and, for resumable training,
// the AdamW moments ("optimizer.exp_avg.<fqn>", "optimizer.exp_avg_sq.<fqn>")
// and the step, in one safetensors file written atomically.
#pragma once

#include <cstdint>
#include <string>

#include "io/safetensors.h"
#include "runtime/model_state.h"

namespace remat {

void save_checkpoint(const std::string& path, const ModelState& state, int64_t step,
                     bool with_optimizer);

// The "step" metadata of a checkpoint (0 if absent); InputError unless it
// is a non-negative decimal integer, all of it.
int64_t checkpoint_step(const SafetensorsReader& reader);

// Loads the weights (every parameter must be present with its shape) and, if
// the file has them and the state wants them, the optimizer moments. Returns
// the step stored in the file (0 if none). InputError on any mismatch.
int64_t load_checkpoint(const std::string& path, ModelState& state, bool with_optimizer);

}  // namespace remat
