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
  double recompute_flops = 0;
};

// InputError unless the path ends in .svg, .csv or .json.
void check_pareto_path(const std::string& path);

// Writes through a temporary file and a rename; refuses to replace anything
// that is not a regular file. `budget` (0: none) is marked; recompute is
// also shown as a share of `model_flops` (forward + backward per step).
void write_pareto(const std::string& path, const std::vector<BudgetChoice>& front,
                  const std::vector<ParetoMark>& marks, int64_t budget, double model_flops,
                  const std::string& title);

}  // namespace remat
