// What `remat plan` reports (PlanReport, computed before anything is
// printed; plan_command.cc makes it) and its two forms: the text report
// and the JSON of `remat plan --json`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ac/budget.h"
#include "io/config.h"
#include "models/registry.h"
#include "planner/budget_plan.h"
#include "planner/op_timing.h"
#include "planner/pareto_output.h"
#include "planner/plan_command.h"
#include "planner/planner.h"

namespace remat {

// The budget plan at the peak of each fixed mode (selective 2, the op
// modes): the least recompute within the same peak, never more.
struct AtFixed {
  Prediction fixed, budget;
  double fixed_cost, budget_cost;  // under the configured cost model
};

// Everything `remat plan` reports, computed before anything is printed.
struct PlanReport {
  BuiltModel model;
  PlannerOptions planner;
  AcOptions configured;  // "auto" thresholds resolved
  std::string auto_why;
  bool budget_mode = false;  // solved by remat's budget solver
  BudgetPlan budget;         // when budget_mode
  Plan configured_plan;
  Prediction chosen;             // the configured plan's prediction
  std::vector<Prediction> rows;  // the comparison modes, or the configured plan first
  size_t configured_row = 0;     // the row the configured plan is
  OpCost cost;
  std::string cost_note;
  bool measured = false;  // cost in seconds, not FLOPs
  std::vector<AtFixed> at_fixed;
  std::vector<BudgetChoice> front;  // with --pareto
  std::vector<double> row_costs;    // each row's recompute under the cost model
  ParetoAxis axis;                  // with --pareto
  // With validation.enabled, on the CPU engine (what `remat train` prints):
  // the forward-only pass at batch 1 with the inference plan, on top of the
  // training state, and the training step beside it.
  std::optional<Prediction> validation;
  int64_t cpu_training_peak = 0;
  // With the logits kept whole: the configured plan with the chunked loss
  // head instead (model.loss_chunk_rows = kHintChunkRows), when it plans a
  // peak at least 1% lower.
  std::optional<Prediction> chunked_loss;
  // model.loss_chunk_rows = "auto": what the planner chose, and why.
  bool loss_head_auto = false;
  int64_t loss_chunk_rows = 0;
  std::string loss_head_why;
  double seconds = 0;
};

// model.loss_chunk_rows the chunked-loss hint proposes.
constexpr int64_t kPlanHintChunkRows = kSuggestedLossChunkRows;

void print_plan_json(const PlanReport& r, const JobConfig& config,
                     const PlanCommandOptions& options);
void print_plan_text(const PlanReport& r, const JobConfig& config,
                     const PlanCommandOptions& options);

}  // namespace remat
