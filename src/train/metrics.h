// What a run reports (spec.md §4) at each logged step: the formatted log
// line, the metrics file's JSON line and the TensorBoard scalars.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/tensorboard.h"

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

// A logged step's TensorBoard scalars, under torchtitan's tags where the
// quantity is the same: loss_metrics/global_avg_loss, grad_norm,
// ntokens_seen (`tokens_seen`: every rank's, all steps so far),
// throughput(tps) (this rank's), tflops, mfu(%), time_metrics/end_to_end(s)
// (`step_seconds`), memory/max_active(GiB) and memory/max_active(%) (the
// allocator's peak, what the log line's memory is), lr; and remat's hfu(%).
std::vector<Scalar> tensorboard_scalars(const StepMetrics& m, int64_t tokens_seen,
                                        double step_seconds);

// A validation pass's scalar: validation_metrics/loss.
std::vector<Scalar> tensorboard_validation_scalars(double loss);

// <job.dump_folder>/<metrics.save_tb_folder>: where the runs' event folders go.
std::string tensorboard_root(const JobConfig& config);

// Whether this rank writes TensorBoard events: with enable_tensorboard, rank
// 0, or every rank with save_for_all_ranks.
bool writes_tensorboard(const JobConfig& config, int rank);

// Opens this run's event file: in tensorboard_root / <YYYYmmdd-HHMM, local
// time now> (/ rank_<rank> with save_for_all_ranks), folders created.
TensorBoardLog open_tensorboard(const JobConfig& config, int rank);

}  // namespace remat
