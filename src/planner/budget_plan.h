// Budget modes (spec.md §2 memory_budget and auto): the planner prices
// every choice the budget solver (ac/budget.h) considers by one replay of a
// reference plan, solves, and checks the answer by replaying it.
#pragma once

#include <string>
#include <vector>

#include "ac/budget.h"
#include "io/config.h"
#include "planner/planner.h"

namespace remat {

// The solver's table for this program and set-up, under a cost model.
BudgetProblem budget_problem(const Program& program, const PlannerOptions& options,
                             const OpCost& cost);

// The configured cost model: FLOPs, or measured seconds (calibrating or
// reading the cache; `note` says which and where).
OpCost cost_model_from_config(const JobConfig& config, const Program& program, std::string* note);

// What a plan's recompute costs under a cost model.
double recompute_cost(const Program& program, const Plan& plan, const OpCost& cost);

struct BudgetPlan {
  Plan plan;
  BudgetChoice choice;
  int64_t budget = 0;         // bytes
  std::string budget_source;  // "memory_budget 0.5", "memory.limit", "physical RAM"
  std::string cost_unit;      // "FLOPs" or "s"
  std::string cost_note;      // how the cost model was obtained
  double solve_seconds = 0;
  bool optimal() const { return choice.lower_bound >= choice.cost; }
  // "optimal" or "within 1.2% of optimal (lower bound ...)"
  std::string certificate() const;
};

// Whether a memory_budget value is a fraction (a bare number), not a size.
bool is_budget_fraction(const std::string& memory_budget);

// The budget in bytes for mode memory_budget (a fraction between full AC's
// peak and no AC's, or a size) or auto (memory.limit or physical RAM).
int64_t resolve_budget(const AcOptions& options, const JobConfig& config, const Program& program,
                       const PlannerOptions& planner, std::string* source);

// Solves for the configured budget. InputError when no plan fits: it names
// the smallest peak reachable and a batch size that would fit.
// The chunk of the loss head (model.loss_chunk_rows) the planner suggests
// where the logits kept whole keep a plan from fitting: large enough that
// the output GEMMs keep their rate, small against the logits of any
// long-sequence batch.
constexpr int64_t kSuggestedLossChunkRows = 1024;

BudgetPlan make_budget_plan(const AcOptions& options, const JobConfig& config,
                            const Program& program, const PlannerOptions& planner);

// selective_op_ac_mm_flops_threshold = "auto": among thresholds that take
// the smallest matmuls out of the alternation (0, and just above each
// matmul's FLOPs), the one with the lowest predicted peak whose peak and
// recompute are both no worse than threshold 0's. Returns the options with
// the threshold set; `why` lists the matmuls it takes out and the numbers.
AcOptions resolve_auto_threshold(const Program& program, AcOptions options,
                                 const PlannerOptions& planner, std::string* why);

}  // namespace remat
