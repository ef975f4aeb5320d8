// What a run reports (spec.md §4) at each logged step: the formatted log
// line and the metrics file's JSON line.
#pragma once

#include <cstdint>
#include <string>

namespace remat {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  int64_t peak_bytes = 0;
  int64_t device_bytes = 0;
  double tokens_per_second = 0;
  double model_flops_per_second = 0;     // model FLOPs only
  double hardware_flops_per_second = 0;  // recompute included
  double peak_flops = 1;
  double lr = 0;
  int64_t minor_faults = 0;  // the process's, over the logged window
};

// "step: 12  loss: 7.1234  grad_norm: 1.2345  memory:  3.21GiB(13.40%)
//  tps: 1,234  tflops: 0.08  mfu: 41.20%  hfu: 45.10%", torchtitan's line:
// memory always in GiB, as "%5.2f". With `color`, each field in torchtitan's
// ANSI colour (for a terminal only: a file or pipe gets plain text).
std::string format_log_line(const StepMetrics& m, bool color = false);

// One JSON object per logged step with, in this order: step, loss,
// grad_norm, lr, peak_bytes, activation_bytes_at_peak, max_activation_bytes,
// tps, mfu, hfu, minor_faults (page faults the process took since the
// previous logged step: 0 in steady state). Doubles read back exactly; non-finite ones are null,
// which JSON has (printf would write nan or inf, which it does not).
std::string metrics_json(const StepMetrics& m, int64_t activation_bytes_at_peak,
                         int64_t max_activation_bytes);

// The JSON line of a validation pass: {"step": 10, "validation_loss": 5.1}.
std::string validation_json(int64_t step, double loss);

}  // namespace remat
