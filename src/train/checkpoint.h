// Checkpoints: model weights (torchtitan FQNs) and, for resumable training,
// the AdamW moments ("optimizer.exp_avg.<fqn>", "optimizer.exp_avg_sq.<fqn>")
// and the step, in one safetensors file written atomically.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/safetensors.h"
#include "runtime/model_state.h"

namespace remat {

// `run` adds string metadata describing the run that saved (RunRecord).
void save_checkpoint(const std::string& path, const ModelState& state, int64_t step,
                     bool with_optimizer, const std::map<std::string, std::string>& run = {});

// The "step" metadata of a checkpoint (0 if absent); InputError unless it
// is a non-negative decimal integer, all of it.
int64_t checkpoint_step(const SafetensorsReader& reader);

// What a training run records in each checkpoint it saves, so that a resume
// can continue the data where the run stopped and say what changed
// (README "Resuming a run"). -1: not recorded (a seed checkpoint, or one
// written before these keys existed).
struct RunRecord {
  int64_t steps = -1;             // "training.steps": the run's planned length
  int64_t local_batch_size = -1;  // "training.local_batch_size"
  int64_t seq_len = -1;           // "training.seq_len"
  int64_t windows = -1;           // "data.windows": seq_len + 1 token windows in its dataset
  int64_t next_window = -1;       // "data.next_window": where the next batch would start

  std::map<std::string, std::string> metadata() const;
  // InputError naming the file and key unless each present value is a
  // non-negative decimal integer.
  static RunRecord read(const SafetensorsReader& reader);
};

// Loads the weights (every parameter must be present with its shape) and, if
// the file has them and the state wants them, the optimizer moments. Returns
// the step stored in the file (0 if none). InputError on any mismatch.
int64_t load_checkpoint(const std::string& path, ModelState& state, bool with_optimizer);

}  // namespace remat
