// What the planner and the runtime take from a job config, read in one
// place: the AC options (ac/ never sees the config) and the memory a run may
// use.
#pragma once

#include <cstdint>

#include "ac/policy.h"
#include "io/config.h"
#include "planner/planner.h"

namespace remat {

// From the [activation_checkpoint] section (mode, selective_ac_option,
// threshold, filter). InputError for values it cannot interpret.
AcOptions ac_options_from_config(const JobConfig& config);

// memory.limit in bytes, or 0 when it is not set.
int64_t memory_limit_bytes(const JobConfig& config);

// What a run on this machine may use: memory.limit, or physical RAM.
int64_t available_memory(const JobConfig& config);

// Compute dtype, sharding and device memory (memory.limit) of the run.
PlannerOptions planner_options_from_config(const JobConfig& config);

}  // namespace remat
