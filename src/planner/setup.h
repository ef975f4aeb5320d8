// The one path every command takes from a job config to what it runs or
// predicts (train, eval, grads, plan): the model's program at a batch size,
// then the activation-checkpointing plan that program runs with. Nothing is
// allocated; the state and the executor come after (train/session.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/config.h"
#include "models/registry.h"
#include "planner/budget_plan.h"
#include "planner/planner.h"

namespace remat {

// How the configured plan was chosen; `remat plan` reports each part.
struct AcChoice {
  AcOptions options;     // as configured, a threshold "auto" resolved
  std::string auto_why;  // what threshold "auto" chose and why; empty otherwise
  // Modes memory_budget (remat solver) and auto: the solver's answer.
  std::optional<BudgetPlan> budget;
  Plan plan;  // the plan the run executes
};

// The configured plan of a training step: budget modes solved here, the
// others by make_plan. InputError for a budget that no plan fits.
AcChoice choose_ac_plan(const JobConfig& config, const Program& program,
                        const PlannerOptions& planner);

enum class Pass {
  kTraining,     // forward and backward under the configured plan
  kForwardOnly,  // evaluation: the inference plan, nothing kept for a backward
};

struct Setup {
  BuiltModel model;
  Pass pass;
  AcChoice ac;  // kForwardOnly: only `plan` is set
  // The loss head the program runs: model.loss_chunk_rows as configured, or
  // as "auto" resolved (0: the logits whole). `loss_head_why` says what
  // "auto" chose and why; empty for a configured number.
  int64_t loss_chunk_rows = 0;
  std::string loss_head_why;

  const Program& program() const { return model.program; }
};

// Whether the setup's program is built in bf16 (Program::compute_dtype):
// mixed_precision_param "bfloat16" on the CPU engine, one rank. A sharded
// set-up is priced for a device engine this build does not have: its
// program stays fp32 and the planner prices bf16 with a booking scale
// (planner.h).
bool runs_bf16(const JobConfig& config, const PlannerOptions& planner);

// model.loss_chunk_rows = "auto", for a training step: the program with the
// logits whole and the one with kSuggestedLossChunkRows-row chunks, each
// with its configured plan. Modes memory_budget and auto keep the one whose
// plan fits the budget at the lower cost (the chunked head's cost counts its
// rebuilt logits: one more output-projection forward, under the cost
// model); the fixed modes keep the logits whole unless their peak exceeds
// the memory available (memory.limit or physical RAM) and the chunks lower
// it. Whole where one chunk would hold every row, and for a forward-only
// pass (nothing is kept for a backward).
//
// InputError for a model the config does not describe, or a plan that cannot
// be made. `planner` is the set-up the plan is solved for (the CPU engine's
// by default; `remat plan` passes the configured devices).
Setup make_setup(const JobConfig& config, int64_t batch, Pass pass,
                 const PlannerOptions& planner = PlannerOptions{});

// The loss heads (model.loss_chunk_rows; 0: the logits whole) a training
// step at `batch` weighs: the configured rows; under "auto", 0 and
// kSuggestedLossChunkRows, or only 0 where one chunk would hold every row.
std::vector<int64_t> loss_head_candidates(const JobConfig& config, int64_t batch);

// The config with model.loss_chunk_rows as `setup` resolved it: what the
// commands hand on to everything else that builds the model (calibration,
// batch advice, validation), so that all of it prices the program that runs.
JobConfig with_resolved_loss_head(const JobConfig& config, const Setup& setup);

}  // namespace remat
