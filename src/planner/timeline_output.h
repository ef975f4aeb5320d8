// `remat plan --timeline FILE.svg`: the bytes held over one training step,
// one band per memory category (parameters, gradients, optimizer state, kept
// activations, temporaries) stacked, step by step through the schedule's
// forward, recompute and backward, with the phases and the peak op labelled.
// The series come from the planner's exact replay (replay_timeline), so the
// picture is the run's books, not a sample. Beside FILE.svg goes FILE.json
// with the same series; a path ending in .json writes the JSON alone.
#pragma once

#include <string>
#include <vector>

#include "ac/policy.h"
#include "graph/program.h"
#include "planner/planner.h"

namespace remat {

// InputError unless the path ends in .svg or .json and it (and, for .svg,
// its .json sibling) can be written.
void check_timeline_path(const std::string& path);

// The configured plan's timeline and, when `compare` names one of
// comparison_modes() (e.g. "none"), that mode's on the same axes below it.
// InputError for an unknown `compare`, listing the names.
void write_timelines(const std::string& path, const std::string& compare, const Program& program,
                     const Plan& configured_plan, const AcOptions& configured,
                     const PlannerOptions& planner, const std::string& title);

}  // namespace remat
