#include "train/optimizer.h"

#include <cmath>

#include "kernels/cpu/kernels.h"

namespace remat {

double clip_grad_norm(ModelState& state, double max_norm) {
  // Buffers (non-trainable, e.g. MoE expert_bias) have no gradient to clip.
  const auto& params = state.program->params;
  double sum = 0;
  for (size_t i = 0; i < state.grads.size(); ++i) {
    if (params[i].trainable) sum += cpu::sum_squares(state.grads[i].data(), state.grads[i].numel());
  }
  const double norm = std::sqrt(sum);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (size_t i = 0; i < state.grads.size(); ++i) {
      if (!params[i].trainable) continue;
      cpu::scale_inplace(state.grads[i].data(), state.grads[i].numel(), static_cast<float>(coef));
    }
  }
  return norm;
}

void adamw_step(ModelState& state, const AdamWConfig& config, double lr, int64_t step) {
  state.ensure_optimizer_state();
  for (size_t i = 0; i < state.params.size(); ++i) {
    if (!state.program->params[i].trainable) continue;
    cpu::adamw_update(state.params[i].data(), state.grads[i].data(), state.exp_avg[i].data(),
                      state.exp_avg_sq[i].data(), state.params[i].numel(),
                      static_cast<float>(lr), static_cast<float>(config.beta1),
                      static_cast<float>(config.beta2), static_cast<float>(config.eps),
                      static_cast<float>(config.weight_decay), step);
  }
}

}  // namespace remat
