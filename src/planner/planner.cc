#include "planner/planner.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include "runtime/executor.h"
#include "runtime/sharded_state.h"

namespace remat {

namespace {

// The priced device set-ups (runs_sharded_on_cpu is false): parameters a
// step reads: one FSDP unit is a transformer block; outside the
// blocks each op's own parameters form a unit (embedding; norm + output).
struct UnitBooker {
  const Program& program;
  Allocator& allocator;
  double gathered_bytes_per_param;  // compute dtype, before the temporaries' scale
  double temporaries_scale;
  bool sharded;
  std::optional<int32_t> current_unit;  // the key of the unit gathered now, if any
  Tensor gathered_params, gathered_grads;

  int64_t unit_params(int32_t unit) const {
    int64_t n = 0;
    std::vector<bool> seen(program.params.size(), false);
    for (const Node& node : program.nodes) {
      if (node.block != unit) continue;
      for (ParamId p : node.params) {
        if (!seen[p]) n += numel(program.params[p].shape);
        seen[p] = true;
      }
    }
    return n;
  }

  void on_step(const Step& step) {
    const int32_t unit = program.nodes[step.node].block;
    const bool backward = step.kind != Step::Kind::kForward;
    const int32_t key = gather_unit(program, step);
    if (key == current_unit) return;
    current_unit = key;
    gathered_params.reset();
    gathered_grads.reset();
    if (!sharded) return;
    // The all-gathered weights of this unit, in the compute dtype; in the
    // backward also its full-size fp32 gradients before reduce-scatter.
    const int64_t n = unit_params(unit);
    const auto elems = static_cast<int64_t>(static_cast<double>(n) * gathered_bytes_per_param / 4);
    gathered_params = Tensor(allocator, {elems}, MemoryCategory::kTemporaries);
    if (backward) {
      const auto grad_elems = static_cast<int64_t>(static_cast<double>(n) / temporaries_scale);
      gathered_grads = Tensor(allocator, {grad_elems}, MemoryCategory::kTemporaries);
    }
  }
};

}  // namespace

namespace {

// What a replay reports as it goes: `close` when a step has ended (before the
// next step's FSDP booking), `open` when a step begins (after it).
struct ReplayWatch {
  std::function<void(Allocator&)> close;
  std::function<void(Allocator&, const Step&)> open;
};

// Replays the plan's schedule on a counting-only allocator and fills the
// parts of a prediction a replay measures.
// `with_backward` false: the forward-only pass (inference plan) booked on top
// of a training run's full state.
Prediction replay(const Program& program, const Plan& plan, const PlannerOptions& options,
                  const ReplayWatch* watch, bool with_backward = true) {
  Allocator allocator(/*counting_only=*/true);
  // The CPU engine's sharded run (fp32): the runtime's sharded state books
  // the shards and every gathered unit and full gradient itself, so this
  // replay makes the run's requests, rank for rank (every rank's are alike).
  const bool runs_sharded = runs_sharded_on_cpu(program, options);
  const double shard = runs_sharded ? 1.0 : 1.0 / static_cast<double>(options.shard_degree);
  const double act = booking_scale(program, options);
  // The bookings of the executor's temporaries and activations are in its
  // fp32 elements; the gathered weights are booked in elements already
  // scaled to the compute dtype, so temporaries share the activation scale.
  allocator.set_scale({shard, shard, shard, act, act});

  ModelState state(program, allocator, /*with_gradients=*/true, cpu_backend(),
                   runs_sharded ? Holds::kBuffersOnly : Holds::kEverything);
  state.ensure_optimizer_state();
  Executor executor(program, make_schedule(program, plan, with_backward), allocator, state);
  std::unique_ptr<ShardedState> sharded;
  if (runs_sharded) {
    sharded = std::make_unique<ShardedState>(state, executor.schedule(),
                                             static_cast<int>(options.shard_degree), 0);
    executor.set_param_source(sharded.get());
  }
  // A single unsharded device computes on its weights in place (in bf16,
  // the executor books its own copies); a priced set-up works on a gathered
  // (and possibly cast) copy of each unit.
  const bool typed = program.compute_dtype != DType::kF32;
  const bool gathered =
      !runs_sharded && (options.shard_degree > 1 || (options.bf16_compute && !typed));
  UnitBooker booker{program, allocator, (options.bf16_compute ? 2.0 : 4.0) / act,
                    act,     gathered,  std::nullopt,
                    {},      {}};
  bool first = true;
  executor.set_step_observer([&](const Step& step) {
    if (watch && !first) watch->close(allocator);
    first = false;
    booker.on_step(step);
    if (watch) watch->open(allocator, step);
  });
  allocator.reset_peak();
  const int64_t state_bytes = allocator.current().total();
  executor.run(Batch{nullptr, nullptr});
  if (watch) watch->close(allocator);
  booker.gathered_params.reset();
  booker.gathered_grads.reset();

  Prediction p;
  p.mode = plan.description;
  p.peak_bytes = allocator.peak();
  p.at_peak = allocator.at_peak();
  p.peak_during = allocator.peak_label();
  p.kept_activation_bytes = allocator.category_peaks()[MemoryCategory::kActivations];
  p.state_bytes = state_bytes;
  p.model_flops = executor.counts().forward_flops + executor.counts().backward_flops;
  p.recompute_flops = executor.counts().recompute_flops;
  p.warnings = plan.warnings;
  p.fits = options.device_memory <= 0 || p.peak_bytes <= options.device_memory;
  return p;
}

}  // namespace

bool runs_sharded_on_cpu(const Program& program, const PlannerOptions& options) {
  return options.shard_degree > 1 && !options.bf16_compute && program.compute_dtype == DType::kF32;
}

double activation_scale(const PlannerOptions& options) { return options.bf16_compute ? 0.5 : 1.0; }

double booking_scale(const Program& program, const PlannerOptions& options) {
  return program.compute_dtype == DType::kF32 ? activation_scale(options) : 1.0;
}

Prediction predict(const Program& program, const Plan& plan, const PlannerOptions& options) {
  return replay(program, plan, options, nullptr);
}

Prediction predict_validation(const Program& program, const Plan& plan) {
  return replay(program, plan, PlannerOptions{}, nullptr, /*with_backward=*/false);
}

std::vector<StepLevels> replay_levels(const Program& program, const Plan& plan,
                                      const PlannerOptions& options) {
  std::vector<StepLevels> levels;
  ReplayWatch watch{[&](Allocator& allocator) { levels.back().peak = allocator.peak(); },
                    [&](Allocator& allocator, const Step&) {
                      levels.push_back({allocator.current().total(), 0});
                      allocator.reset_peak();
                    }};
  replay(program, plan, options, &watch);
  return levels;
}

std::vector<TimelineSample> replay_timeline(const Program& program, const Plan& plan,
                                            const PlannerOptions& options) {
  std::vector<TimelineSample> samples;
  ReplayWatch watch{[&](Allocator& allocator) {
                      samples.back().after = allocator.current();
                      samples.back().peak = allocator.at_peak();
                    },
                    [&](Allocator& allocator, const Step& step) {
                      samples.push_back({step.kind, step.node, {}, {}});
                      allocator.reset_peak();
                    }};
  replay(program, plan, options, &watch);
  return samples;
}

std::vector<NamedMode> comparison_modes(const AcOptions& configured) {
  auto op = [](double threshold, std::vector<std::string> filter) {
    AcOptions o;
    o.mode = AcOptions::Mode::kSelectiveOp;
    o.mm_flops_threshold = threshold;
    o.force_recompute_fqns = std::move(filter);
    return o;
  };
  AcOptions none, full, layer2;
  none.mode = AcOptions::Mode::kNone;
  full.mode = AcOptions::Mode::kFull;
  layer2.mode = AcOptions::Mode::kSelectiveLayer;
  layer2.layer_frequency = 2;
  using Mode = AcOptions::Mode;
  const Mode m = configured.mode;
  return {{"none", none, m == Mode::kNone},
          {"full", full, m == Mode::kFull},
          {"selective 2", layer2, m == Mode::kSelectiveLayer && configured.layer_frequency == 2},
          {"op threshold 0", op(0, {})},
          {"op configured", op(configured.mm_flops_threshold, configured.force_recompute_fqns),
           m == Mode::kSelectiveOp},
          {"op threshold 1e50", op(1e50, {})}};
}

}  // namespace remat
