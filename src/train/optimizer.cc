#include "train/optimizer.h"

#include <cmath>

namespace remat {

double clip_grad_norm(ModelState& state, double max_norm) {
  // Buffers (non-trainable, e.g. MoE expert_bias) have no gradient to clip.
  const auto& params = state.program->params;
  Backend& backend = *state.backend;
  double sum = 0;
  for (size_t i = 0; i < state.grads.size(); ++i) {
    if (params[i].trainable) sum += backend.sum_squares(state.grads[i]);
  }
  const double norm = std::sqrt(sum);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (size_t i = 0; i < state.grads.size(); ++i) {
      if (!params[i].trainable) continue;
      backend.scale(state.grads[i], static_cast<float>(coef));
    }
  }
  return norm;
}

void adamw_step(ModelState& state, const AdamWConfig& config, double lr, int64_t step) {
  state.ensure_optimizer_state();
  const AdamWStep hyper{static_cast<float>(lr),
                        static_cast<float>(config.beta1),
                        static_cast<float>(config.beta2),
                        static_cast<float>(config.eps),
                        static_cast<float>(config.weight_decay),
                        step};
  for (size_t i = 0; i < state.params.size(); ++i) {
    if (!state.program->params[i].trainable) continue;
    state.backend->adamw_update(state.params[i], state.grads[i], state.exp_avg[i],
                                state.exp_avg_sq[i], hyper);
  }
}

}  // namespace remat
