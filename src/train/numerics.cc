#include "train/numerics.h"

#include <cmath>
#include <cstdio>

namespace remat {

bool all_finite(const float* data, int64_t n) {
  // x * 0 is NaN exactly when x is NaN or infinite, so sums of it stay 0
  // for finite data; 16 independent sums and no branch per element let the
  // compiler vectorise the scan (a checkpoint's worth of floats).
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += data[i + l] * 0.0f;
  for (; i < n; ++i) acc[0] += data[i] * 0.0f;
  float total = 0.0f;
  for (float a : acc) total += a;
  return total == 0.0f;
}

std::string non_finite_step_message(int64_t step, double loss, double grad_norm,
                                    const Program& program, Backend& backend,
                                    const std::vector<Tensor>& grads) {
  char values[160];
  std::snprintf(values, sizeof values, "loss = %g, grad_norm = %g", loss, grad_norm);
  std::string what = std::isfinite(loss) ? "gradient norm" : "loss";
  std::string message =
      "non-finite " + what + " at step " + std::to_string(step) + " (" + values + ")";
  // The backward pass makes gradients from the output back to the
  // embedding, so the first to go bad in time is the last in model order.
  for (size_t i = grads.size(); i-- > 0;) {
    const Tensor& g = grads[i];
    if (g.defined() && g.raw() != nullptr && !all_finite(HostView(backend, g).data(), g.numel()))
      return message +
             "; the first parameter whose gradient went non-finite (in backward "
             "order) is '" +
             program.params[i].fqn + "'";
  }
  return message;
}

}  // namespace remat
