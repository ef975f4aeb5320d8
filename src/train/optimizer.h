// AdamW with decoupled weight decay and global gradient-norm clipping, as
// torch.optim.AdamW and torch.nn.utils.clip_grad_norm_ do.
#pragma once

#include "runtime/model_state.h"

namespace remat {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// torch.nn.utils.clip_grad_norm_ in two halves: `norm` is the global L2
// norm of all gradients (accumulated in double in parameter order), `scale`
// the factor clipping multiplies every gradient by: max_norm / (norm + 1e-6)
// when that is below 1, else 1.
struct GradClip {
  double norm = 0;
  float scale = 1.0f;
};

// Measures; the gradients are left as they are. adamw_step applies the
// scale as it reads them: one pass over the gradients fewer than scaling
// them in place, with the same bits (each is rounded once, g * scale).
GradClip clip_grad_norm(ModelState& state, double max_norm);
// The GradClip of a norm already summed (over shards, say).
GradClip clip_of_norm(double norm, double max_norm);

// One AdamW step at learning rate lr on the gradients times grad_scale
// (GradClip::scale); `step` counts from 1.
void adamw_step(ModelState& state, const AdamWConfig& config, double lr, int64_t step,
                float grad_scale);

}  // namespace remat
