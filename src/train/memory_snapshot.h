// profiling.enable_memory_snapshot: the bytes the allocator held over one
// training step, measured (not planned), drawn as `remat plan --timeline`
// draws the plan (planner/timeline_output.h): one sample per schedule step
// with its phase, its op, the level once it ended and the breakdown at its
// highest moment, taken from the allocator's books as they changed. The
// planner replays the same requests, so for a plan it books exactly (one
// fp32 rank) the measured series equals replay_timeline's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/program.h"
#include "io/config.h"
#include "planner/planner.h"
#include "planner/timeline_output.h"
#include "runtime/executor.h"

namespace remat {

// Runs `step` (which runs `executor` once) while following `allocator`, and
// returns the samples of the executor's schedule steps. The executor's step
// observer and the allocator's listener are removed again, also on a throw.
std::vector<TimelineSample> measure_timeline(Allocator& allocator, Executor& executor,
                                             const std::function<void()>& step);

// Writes `measured` (step `step`'s) to
// <job.dump_folder>/<profiling.save_memory_snapshot_folder>/step-<step>.svg,
// with step-<step>.json beside it, creating the folder; returns the .svg path.
std::string write_memory_snapshot(const JobConfig& config, int64_t step, const Program& program,
                                  const std::string& title, const TimelineSeries& measured);

// InputError (naming the key) unless that folder can be created and written:
// checked before training starts.
void check_memory_snapshot_folder(const JobConfig& config);
// Creates it, before training starts (as create_profile_traces_folder).
void create_memory_snapshot_folder(const JobConfig& config);
// InputError unless step `step`'s two files can be written there: each
// absent or a regular file, and neither the metrics file (checked once the
// step is known, before training starts).
void check_memory_snapshot_files(const JobConfig& config, int64_t step);

}  // namespace remat
