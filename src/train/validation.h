// Validation while training, as torchtitan's [validation]: every
// validation.freq steps, the mean loss over validation.steps rows (-1: all)
// of held-out data, forward only with the inference plan: the pass `remat
// eval` runs (train/evaluate.h), on the training run's own weights and
// allocator, so its loss equals `remat eval` on a checkpoint of that step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/dataset.h"
#include "planner/setup.h"
#include "runtime/executor.h"
#include "train/session.h"

namespace remat {

// The tokens validation reads, checked before anything is allocated:
// validation.dataset when set; else, with the built-in fortunes, their
// held-out part (io/dataset.h split_held_out), which is cut out of
// `training` so no run with validation ever trains on it. InputError for a
// training file without validation.dataset, or data shorter than one row.
TokenDataset validation_tokens(const JobConfig& config, TokenDataset& training, int64_t vocab_size);

// What validation runs: the forward-only setup at batch 1 (the inference
// plan) and the peak the planner predicts for it on top of the training
// state (predict_validation). Checked before anything is allocated, like the
// training step: InputError when that peak exceeds memory.limit (or RAM).
struct ValidationPlan {
  Setup setup;
  int64_t predicted_peak = 0;
};
ValidationPlan plan_validation(const JobConfig& config);

class Validator {
 public:
  // `session` is the training run's; its state and allocator are shared.
  Validator(const JobConfig& config, Session& session, ValidationPlan plan, TokenDataset data);
  Validator(const Validator&) = delete;
  Validator& operator=(const Validator&) = delete;

  // The mean loss over the rows. Resets the allocator's peak first, so its
  // peak() afterwards is this pass's.
  double run();
  int64_t predicted_peak() const { return plan_.predicted_peak; }
  // "12 rows of 256 tokens from fortunes (held out: ...)", for the log.
  std::string describe() const;

 private:
  const ValidationPlan plan_;
  Session& session_;
  Executor executor_;
  const TokenDataset data_;
  const int64_t seq_len_, rows_;
};

}  // namespace remat
