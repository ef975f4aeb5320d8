// AdamW with decoupled weight decay and global gradient-norm clipping, as
// torch.optim.AdamW and torch.nn.utils.clip_grad_norm_ do.
#pragma once

#include "runtime/model_state.h"

namespace remat {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// The global L2 norm of all gradients (accumulated in double in parameter
// order); when above max_norm, scales every gradient by max_norm / (norm +
// 1e-6). Returns the norm before clipping.
double clip_grad_norm(ModelState& state, double max_norm);

// One AdamW step at learning rate lr; `step` counts from 1.
void adamw_step(ModelState& state, const AdamWConfig& config, double lr, int64_t step);

}  // namespace remat
