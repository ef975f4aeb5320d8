// AC policies (spec.md §2): turn a program into a plan. The policy reads
// only op classes, FLOPs, FQNs and block indices; it names no model and no
// particular op.
#pragma once

#include <string>
#include <vector>

#include "ac/plan.h"

namespace remat {

struct AcOptions {
  // kMemoryBudget and kAuto are solved by the planner (planner/budget_plan.h),
  // which prices choices by replaying them; make_plan does not take them.
  enum class Mode {
    kNone,
    kFull,
    kSelectiveLayer,
    kSelectiveOp,
    kMemoryBudget,
    kAuto
  } mode = Mode::kSelectiveOp;
  int64_t layer_frequency = 2;    // selective layer AC: every N-th block
  double mm_flops_threshold = 0;  // op AC
  bool auto_threshold = false;    // op AC: "auto", resolved by the planner
  std::vector<std::string> force_recompute_fqns = {"moe.router.gate"};  // op AC
  std::string memory_budget;  // kMemoryBudget: a fraction "0.5" or a size "12GiB"
};

// The options in words: "full", "selective 2", "selective op (threshold 0,
// filter [moe.router.gate])", "memory_budget 0.5", "auto".
std::string describe(const AcOptions& options);

Plan make_plan(const Program& program, const AcOptions& options);

// A plan that keeps nothing for a backward pass (evaluation).
Plan make_inference_plan(const Program& program);

// Substring match where '*' matches any run of characters.
bool fqn_matches(const std::string& fqn, const std::string& pattern);

}  // namespace remat
