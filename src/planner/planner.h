// The planner: predicts a run's memory and FLOPs before it starts, by
// replaying the very schedule the executor follows against a counting-only
// allocator (no tensor is allocated, no kernel runs). What the executor would
// book, the planner books: the prediction for the CPU engine is exact.
//
// bf16 on the CPU engine needs nothing of its own here: its program carries
// bf16 dtypes (graph/program.h) and the executor allocates the bf16 weight
// copies and fp32 staging it uses (runtime/executor.h), so the replay books
// them exactly as the run does.
//
// FSDP/ZeRO-3 sharding over N ranks in fp32 is a run the CPU engine makes
// (runtime/sharded_state.h): the replay drives the runtime's own sharded
// state, so each rank's peak is predicted exactly, the gathered units and
// full gradients in flight included.
//
// It can also price set-ups the CPU engine does not run: sharding with bf16
// compute, priced by a booking scale on the fp32 program (parameters,
// gradients and optimizer state x1/N, activations and temporaries x0.5, the
// unsharded copy of the unit in flight with its weights in bf16), for the
// per-device memory of a GPU run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ac/budget.h"
#include "ac/policy.h"
#include "ac/schedule.h"
#include "core/memory.h"
#include "graph/program.h"

namespace remat {

struct PlannerOptions {
  int64_t shard_degree = 1;   // data-parallel ranks sharing params/grads/optimizer
  bool bf16_compute = false;  // activations and the gathered weights in bf16
  int64_t device_memory = 0;  // bytes per device to compare against (0: none)
};

struct Prediction {
  std::string name;  // short row name, e.g. "op threshold 1e50"
  std::string mode;  // the plan's full description
  int64_t peak_bytes = 0;
  MemorySnapshot at_peak;             // breakdown at the peak moment
  std::string peak_during;            // "backward layers.0.attention.sdpa"
  int64_t kept_activation_bytes = 0;  // high-water mark of kept activations
  // What stays allocated for the whole run (parameters, gradients, optimizer
  // state: the rank's shards when sharded), whatever the AC mode and batch.
  int64_t state_bytes = 0;
  int64_t model_flops = 0;      // forward + backward, per step
  int64_t recompute_flops = 0;  // per step
  std::vector<std::string> warnings;
  bool fits = true;  // peak <= device_memory (when given)
};

Prediction predict(const Program& program, const Plan& plan, const PlannerOptions& options);

// Validation while training on the CPU engine: the forward-only pass of an
// inference setup (`program`, `plan`) booked on top of the training state
// (parameters, gradients, optimizer state), which stays allocated between
// steps. Its peak is what the run's allocator reaches while validating.
Prediction predict_validation(const Program& program, const Plan& plan);

// The same replay, reporting the level at the start of every schedule step
// and the highest level during it (the budget solver's reference table).
std::vector<StepLevels> replay_levels(const Program& program, const Plan& plan,
                                      const PlannerOptions& options);

// One schedule step of the memory timeline (`remat plan --timeline`).
struct TimelineSample {
  Step::Kind kind;
  int32_t node;
  MemorySnapshot after;  // the level once the step has ended
  MemorySnapshot peak;   // the breakdown at the highest level inside the step
};

// The same replay, one sample per schedule step. Exact: the largest
// peak.total() of the samples is predict()'s peak_bytes.
std::vector<TimelineSample> replay_timeline(const Program& program, const Plan& plan,
                                            const PlannerOptions& options);

// Whether the prediction is of the CPU engine's sharded run (exact), not a
// priced device set-up: shard degree > 1, fp32.
bool runs_sharded_on_cpu(const Program& program, const PlannerOptions& options);

// The booking scale of activations and temporaries that prices bf16 on an
// fp32 program (bf16: 0.5).
double activation_scale(const PlannerOptions& options);
// The scale a replay of `program` books with: 1 for a program that carries
// its compute dtype (its bytes are real), else activation_scale(options).
double booking_scale(const Program& program, const PlannerOptions& options);

// The AC modes `remat plan` compares: none, full, selective 2, op (threshold
// 0), op with the configured threshold and filter, op (threshold 1e50).
// A mode is told apart by its name, not by its plan's description: two modes
// may make the same plan.
struct NamedMode {
  std::string name;
  AcOptions options;
  bool configured = false;  // runs the configured options (at most one mode)
};
std::vector<NamedMode> comparison_modes(const AcOptions& configured);

}  // namespace remat
