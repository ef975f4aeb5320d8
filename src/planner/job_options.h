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

// Microbatches per optimizer step (gradient accumulation, as torchtitan's
// training.global_batch_size asks): global_batch_size / (local_batch_size x
// ranks), 1 when global_batch_size is -1. InputError, naming the sizes,
// when it does not divide. Memory is one microbatch's whatever the count:
// the gradients are accumulated in their own buffers.
int64_t gradient_accumulation_steps(const JobConfig& config, int64_t ranks);

// The ranks the [parallelism] degrees describe (replicate x shard), which
// `remat plan` models without mpirun; saturated at INT64_MAX.
int64_t data_parallel_ranks(const JobConfig& config);

}  // namespace remat
