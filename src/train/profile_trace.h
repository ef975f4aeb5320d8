// A Chrome / Perfetto trace of one training step (chrome://tracing or
// ui.perfetto.dev opens it): one complete event per schedule step, named by
// the node's FQN, its category the phase (forward, recompute, backward), so
// the recompute a plan costs is visible where it happens in the step.
#pragma once

#include <cstdint>
#include <string>

#include "io/config.h"
#include "runtime/executor.h"

namespace remat {

// Whether a training run profiles: profiling.enable_profiling, or the
// environment's REMAT_PROFILE=1 (0 or empty: off). InputError for another
// REMAT_PROFILE: "yes" or "0" read as on would write traces unasked.
bool profiling_on(const JobConfig& config);
// REMAT_PROFILE=1 (InputError for a value other than 0, 1 or unset).
bool profiling_asked_by_environment();

// Where torchtitan puts rank `rank`'s trace of `step`:
// dump_folder/save_traces_folder/iteration_<step>/rank<rank>_trace.json.
std::string profile_trace_path(const std::string& dump_folder, const std::string& traces_folder,
                               int64_t step, int rank);

// dump_folder/save_traces_folder: the folder every trace goes under.
std::string profile_traces_folder(const JobConfig& config);

// Creates the traces folder (InputError naming the key where the system
// refuses): done before training starts, so a folder that passed the checks
// but cannot be made (a path under /proc) fails then, not at the first trace.
void create_profile_traces_folder(const JobConfig& config);

// InputError unless rank `rank` can write the trace of every step it
// profiles after `start_step`: the metrics file is none of them, and an
// iteration_N already in the traces folder is a folder whose trace file can
// be replaced (checked before training starts).
void check_profile_trace_targets(const JobConfig& config, int64_t start_step, int rank);

// Writes the trace of the executor's last run (profiling must have been on)
// through a temporary file and a rename, creating the folders.
void write_profile_trace(const std::string& path, const Program& program, const Executor& executor,
                         int64_t step);

}  // namespace remat
