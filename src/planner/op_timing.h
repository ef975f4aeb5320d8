// The measured cost model (activation_checkpoint.cost_model = "measured"):
// what re-running an op costs on this machine, in seconds, at the shapes of
// the run. Pointwise ops count no FLOPs but take time; this model sees it.
//
// Calibration runs a copy of the model cut to its first two blocks (one of
// each kind for Llama 4) at the run's batch and sequence length, forward
// only, on the threads training will use: one warm-up pass, then the fastest
// of several timed passes for each op. The times are cached in a JSON file
// keyed by the machine (CPU model, threads) and each op's kind and shape, and
// reused while the machine and shapes match.
#pragma once

#include <map>
#include <string>

#include "ac/block_memory.h"
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

// Seconds per op; ops outside the table (there are none in a block) cost 0.
OpCost measured_op_cost(const OpTimes& times);

}  // namespace remat
