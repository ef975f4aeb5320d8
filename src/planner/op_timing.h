// The measured cost model (activation_checkpoint.cost_model = "measured"):
// what re-running an op costs on this machine, in seconds, at the shapes of
// the run. Pointwise ops count no FLOPs but take time; this model sees it.
//
// Calibration runs training steps of a copy of the model cut to its first
// two blocks (one of each kind for Llama 4) at the run's batch and sequence
// length, on the threads training will use: one warm-up step, then the
// fastest of several timed steps for each op's forward and backward, and for
// the parameter update (per parameter). The times are cached in a JSON file
// keyed by the machine (CPU model, threads) and each op's kind and shape, and
// reused while the machine and shapes match.
#pragma once

#include <map>
#include <string>

#include "ac/block_memory.h"
#include "ac/plan.h"
#include "io/config.h"

namespace remat {

struct OpTimes {
  std::map<std::string, double> seconds;  // op signature -> forward seconds
  std::string machine;                    // CPU model and threads
  std::string path;                       // the cache file
  bool calibrated_now = false;            // false: read from the cache
};

// Kind and shape: ops with equal signatures take the same time.
std::string op_signature(const Node& node);

// The times of every op in `program`'s blocks, from the cache or measured
// now (then the cache is rewritten atomically). InputError if the
// calibration model does not fit in memory or the cache path is unusable.
OpTimes load_or_measure_op_times(const JobConfig& config, const Program& program);

// Seconds per op's forward; ops outside the table cost 0.
OpCost measured_op_cost(const OpTimes& times);

// A training step's seconds under `plan`: every op's forward and backward,
// the re-run forwards, and the parameter update, from the calibration.
double predicted_step_seconds(const OpTimes& times, const Program& program, const Plan& plan);

}  // namespace remat
