// `remat plan --pareto FILE`: the budget solver's peak/recompute front with
// the fixed AC modes placed on it, as CSV, JSON or an SVG picture.
#pragma once

#include <string>
#include <vector>

#include "ac/budget.h"

namespace remat {

struct ParetoMark {
  std::string name;  // a fixed mode, e.g. "op threshold 0"
  int64_t peak_bytes = 0;
  double recompute = 0;  // in the axis's unit
};

// What the recompute axis counts: FLOPs under the default cost model, or
// seconds under cost_model = "measured" (each op's calibrated time), and
// the whole a point's share is taken of: the model's FLOPs per step, or the
// predicted seconds of a step that recomputes nothing.
struct ParetoAxis {
  std::string unit;        // "flops" or "seconds"
  double whole = 1;        // > 0
  std::string whole_name;  // "model FLOPs", "a step without recompute"
};

// InputError unless the path ends in .svg, .csv or .json and is a file
// remat may write (io/files.h check_output_file: not a link, device or
// folder, nor a file the command reads).
void check_pareto_path(const std::string& path);

// Writes atomically (io/files.h AtomicFile: a temporary created afresh,
// never through a link, then renamed into place). `budget` (0: none) is marked; recompute is
// also shown as a share of `axis.whole`. The front's costs are in the
// axis's unit (the cost model the problem was built with).
void write_pareto(const std::string& path, const std::vector<BudgetChoice>& front,
                  const std::vector<ParetoMark>& marks, int64_t budget, const ParetoAxis& axis,
                  const std::string& title);

}  // namespace remat
