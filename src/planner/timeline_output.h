// `remat plan --timeline FILE.svg`: the bytes held over one training step,
// one band per memory category (parameters, gradients, optimizer state, kept
// activations, temporaries) stacked, step by step through the schedule's
// forward, recompute and backward, with the phases and the peak op labelled.
// The series come from the planner's exact replay (replay_timeline), so the
// picture is the run's books, not a sample; `remat train` with
// profiling.enable_memory_snapshot draws a step's measured books the same
// way (train/memory_snapshot.h). Beside FILE.svg goes FILE.json with the
// same series; a path ending in .json writes the JSON alone.
#pragma once

#include <string>
#include <vector>

#include "ac/policy.h"
#include "graph/program.h"
#include "planner/planner.h"

namespace remat {

// One band chart of the picture: `name` ("configured", "measured", a
// comparison mode), `mode` the plan's description, one sample per schedule
// step (replay_timeline's, or a run's measured the same way).
struct TimelineSeries {
  std::string name, mode;
  std::vector<TimelineSample> samples;
};

// InputError unless the path ends in .svg or .json and it (and, for .svg,
// its .json sibling) can be written.
void check_timeline_path(const std::string& path);

// The configured plan's timeline and, when `compare` names one of
// comparison_modes() (e.g. "none"), that mode's on the same axes below it.
// InputError for an unknown `compare`, listing the names.
void write_timelines(const std::string& path, const std::string& compare, const Program& program,
                     const Plan& configured_plan, const AcOptions& configured,
                     const PlannerOptions& planner, const std::string& title);

// The .json written beside a timeline's .svg (a .json path: itself).
std::string json_path_of(const std::string& path);

// Writes `series` (each with samples), top to bottom on shared axes, to
// `path` (.svg with its .json beside it, or .json alone) atomically;
// InputError naming `key` when a file cannot be written.
void write_timeline_files(const std::string& path, const std::vector<TimelineSeries>& series,
                          const Program& program, const std::string& title, const std::string& key);

}  // namespace remat
