// The memory-budget solver (spec.md §2 memory_budget): the keep-set with the
// least recompute whose true peak, the peak the executor will measure, fits
// a budget.
//
// The peak of a choice (one BlockOption per block, see block_memory.h) is
//   max( outside_none,
//        max_b  P_b + max(forward_base_b + forward_peak_b,
//                         backward_base_b + kept_b + backward_peak_b),
//        P_n + outside_all )
// with P_b the bytes blocks 0..b-1 keep. The bases come from one replay of a
// reference plan (keep everything needed), passed in as a table, so this
// library depends on neither the planner nor the runtime.
//
// The room a choice of blocks b.. needs above P_b is
//   r_b = max(window_peak_b(o_b), kept_b(o_b) + r_{b+1}),  r_n = outside_all,
// and the peak is max(outside_none, r_0). So the solver is a dynamic program
// from the last block back whose state is (r_b, cost), pruned to its Pareto
// front: a choice needing no more room at no more cost is at least as good
// whatever comes before. It is exhaustive over the per-block choices, so
// every point of the final front is optimal for the decision space and
// cost model, for every budget at once. When a front grows too large, a
// per-budget program over blocks in order (state (P_b, cost so far)),
// pruned by bounds, takes over and certifies its answer or prints the gap.
#pragma once

#include <cstdint>
#include <vector>

#include "ac/block_memory.h"
#include "ac/plan.h"
#include "ac/schedule.h"

namespace remat {

// The allocator's level when a schedule step began and its highest level
// during the step, as a replay measured it.
struct StepLevels {
  int64_t start = 0;
  int64_t peak = 0;
};

// One state of the suffix program: a choice for blocks b.. that needs
// `room` bytes under the budget above P_b, at `cost`.
struct SuffixState {
  int64_t room;
  double cost;
  int32_t next;    // its state in the following block's front (-1: none)
  int32_t option;  // block b's option
};

struct BudgetProblem {
  const Program* program = nullptr;
  std::vector<BlockShape> blocks;
  std::vector<int32_t> block_class;                  // per block: index into options
  std::vector<std::vector<BlockOption>> options;     // per class
  std::vector<int32_t> reference_option;             // per class: the keep-everything choice
  std::vector<int64_t> forward_base, backward_base;  // per block
  int64_t outside_all_kept = 0;  // outside blocks while every block holds its keep-set (less it)
  int64_t outside_none_kept =
      0;                  // outside blocks before the first forward / after the last backward
  size_t enumerated = 0;  // choices kept per class after pruning, summed
  // rest_cost[b][j]: a lower bound on the cost of blocks b.. when the room
  // left under the budget (budget - P_b) is in bucket j, i.e. in
  // [rest_origin + j * rest_width, rest_origin + (j + 1) * rest_width). It
  // is the exact suffix program (window peaks and the output layer
  // included) with the room rounded up to its bucket's top, so it never
  // overestimates. It does not depend on the budget: one table serves every
  // solve. The solver drops states that cannot fit or cannot beat a known
  // plan.
  // Which program solve_budget uses: the suffix program (exact for every
  // budget, unless its fronts grow past the state limit) or only the
  // per-budget forward search, its fallback (tests hold both to brute force).
  enum class Search { kSuffixFirst, kForwardOnly };
  Search search = Search::kSuffixFirst;
  int64_t rest_origin = 0;
  int64_t rest_width = 1;
  std::vector<std::vector<double>> rest_cost;
};

// `reference` is the schedule of make_reference_plan(program) and `levels`
// its replay, one entry per step; `bookings` what the executor adds to each
// op's steps. `scale` is the booking scale of
// activations and temporaries; `decidable` limits the decision space (empty:
// every value inside a block).
BudgetProblem make_budget_problem(const Program& program, const Schedule& reference,
                                  const std::vector<StepLevels>& levels,
                                  const StepBookings& bookings, double scale, const OpCost& cost,
                                  const std::vector<bool>& decidable = {});

// Keeps everything the backward pass needs (what "none" keeps).
Plan make_reference_plan(const Program& program);

struct BudgetChoice {
  bool feasible = false;
  std::vector<int32_t> option;  // per block: index into its class's options
  int64_t peak = 0;             // predicted true peak
  double cost = 0;              // recompute cost
  double lower_bound = 0;       // no plan within the budget costs less
};

int64_t peak_of(const BudgetProblem& problem, const std::vector<int32_t>& option);
double cost_of(const BudgetProblem& problem, const std::vector<int32_t>& option);

// The least cost within `budget`, and among plans of that cost the lowest
// peak (so the peak never rises and the cost never falls as the budget falls).
BudgetChoice solve_budget(const BudgetProblem& problem, int64_t budget);

// The lowest peak any choice reaches.
int64_t min_peak(const BudgetProblem& problem);

// The peak/cost trade-off: optimal choices at `points` budgets spread from
// the lowest reachable peak to the reference plan's peak, without repeats.
std::vector<BudgetChoice> pareto_front(const BudgetProblem& problem, int points);

Plan plan_from_choice(const BudgetProblem& problem, const BudgetChoice& choice);

}  // namespace remat
