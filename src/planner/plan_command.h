// `remat plan`: the memory and FLOPs of a run, predicted for the configured
// AC mode and side by side for the others, as aligned tables or JSON.
#pragma once

#include <set>
#include <string>

#include "io/config.h"
#include "planner/planner.h"
#include "planner/setup.h"

namespace remat {

struct PlanCommandOptions {
  bool json = false;                        // machine-readable output (field names in README)
  bool matmuls = false;                     // the log_mm_flops table with bytes and FLOPs/byte
  bool torchtitan = false;                  // torchtitan's usual 8B set-up: bf16 compute,
                                            // sharded over 8, 80GiB per device, for each
                                            // of those keys not in command_line_keys
  std::set<std::string> command_line_keys;  // the config keys the command line sets
  std::string pareto_path;           // --pareto FILE.svg|.csv|.json: the peak/recompute front
  int pareto_points = 64;            // budgets the front is solved at
  bool explain = false;              // list each value the configured plan keeps or rebuilds
  bool maximize_throughput = false;  // search local_batch_size with the budget plan
  std::string timeline_path;         // --timeline FILE.svg|.json: bytes held over one step
  std::string timeline_compare;      // a comparison mode drawn below the configured one
};

int run_plan(JobConfig config, const PlanCommandOptions& options);

// Before a training run allocates anything: InputError (exit 2) if the
// predicted peak of `setup` (a training setup for the CPU engine: one
// process, or each rank of a sharded run) does not fit in memory.limit (or
// physical RAM), naming an AC mode or a batch size that would fit.
void check_run_fits(const JobConfig& config, const Setup& setup);

}  // namespace remat
