// torchtitan's warmup-stable-decay learning-rate schedule: linear warmup over
// warmup_steps, constant, then decay over the last decay_ratio of the steps
// (linear, sqrt or cosine) down to lr_min (a fraction of the peak).
#pragma once

#include <cstdint>
#include <string>

namespace remat {

struct LrSchedule {
  double lr = 8e-4;
  int64_t warmup_steps = 2;
  double decay_ratio = 0.8;
  std::string decay_type = "linear";
  double lr_min = 0.0;
  int64_t total_steps = 10;

  // The learning rate of optimizer step `step` (1-based, as logged).
  double at(int64_t step) const;
};

}  // namespace remat
