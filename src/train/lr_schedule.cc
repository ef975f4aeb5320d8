#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace remat {

double LrSchedule::at(int64_t step) const {
  // torchtitan counts from 0 internally; its warmup makes the first step's
  // factor 1/(warmup+1) so that the learning rate is never exactly 0.
  const int64_t current = step - 1;
  const int64_t warmup = std::min(warmup_steps, total_steps);
  const auto decay_steps = static_cast<int64_t>(std::round(total_steps * decay_ratio));
  const int64_t stable_end = std::max(warmup, total_steps - decay_steps);
  double factor = 1.0;
  if (current < warmup) {
    factor = static_cast<double>(current + 1) / static_cast<double>(warmup + 1);
  } else if (current < stable_end || decay_steps == 0) {
    factor = 1.0;
  } else {
    const double progress =
        static_cast<double>(current + 1 - stable_end) / static_cast<double>(decay_steps);
    double adjustment = 1.0;
    if (decay_type == "sqrt") {
      adjustment = 1.0 - std::sqrt(progress);
    } else if (decay_type == "cosine") {
      adjustment = 0.5 * (1.0 + std::cos(M_PI * progress));
    } else {
      adjustment = 1.0 - progress;
    }
    factor = lr_min + (1.0 - lr_min) * adjustment;
  }
  return lr * factor;
}

}  // namespace remat
