#include "train/optimizer.h"

#include <cmath>

namespace remat {

GradClip clip_grad_norm(ModelState& state, double max_norm) {
  // Buffers (non-trainable, e.g. MoE expert_bias) have no gradient to clip.
  const auto& params = state.program->params;
  Backend& backend = *state.backend;
  double sum = 0;
  for (size_t i = 0; i < state.grads.size(); ++i) {
    if (params[i].trainable) sum += backend.sum_squares(state.grads[i]);
  }
  return clip_of_norm(std::sqrt(sum), max_norm);
}

GradClip clip_of_norm(double norm, double max_norm) {
  const double coef = max_norm / (norm + 1e-6);
  return GradClip{norm, coef < 1.0 ? static_cast<float>(coef) : 1.0f};
}

void adamw_step(ModelState& state, const AdamWConfig& config, double lr, int64_t step,
                float grad_scale) {
  state.ensure_optimizer_state();
  const AdamWStep hyper{static_cast<float>(lr),
                        static_cast<float>(config.beta1),
                        static_cast<float>(config.beta2),
                        static_cast<float>(config.eps),
                        static_cast<float>(config.weight_decay),
                        step,
                        grad_scale};
  for (size_t i = 0; i < state.params.size(); ++i) {
    if (!state.program->params[i].trainable) continue;
    state.backend->adamw_update(state.params[i], state.grads[i], state.exp_avg[i],
                                state.exp_avg_sq[i], hyper);
  }
}

}  // namespace remat
