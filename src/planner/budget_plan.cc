#include "planner/budget_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "ac/report.h"
#include "core/error.h"
#include "core/format.h"
#include "models/registry.h"
#include "planner/job_options.h"
#include "planner/op_timing.h"
#include "runtime/executor.h"

namespace remat {

namespace {

double flop_cost(const Node& node) { return static_cast<double>(forward_flops(node)); }

int64_t peak_of_mode(const Program& program, AcOptions::Mode mode, const PlannerOptions& planner) {
  AcOptions o;
  o.mode = mode;
  return predict(program, make_plan(program, o), planner).peak_bytes;
}

std::string bytes_text(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3fGiB (%lld bytes)",
                static_cast<double>(bytes) / (1024.0 * 1024 * 1024), static_cast<long long>(bytes));
  return buf;
}

}  // namespace

std::string BudgetPlan::certificate() const {
  if (optimal()) return "optimal";
  char buf[128];
  const double gap = choice.cost > 0 ? (choice.cost - choice.lower_bound) / choice.cost : 0;
  std::snprintf(buf, sizeof buf, "within %.2f%% of optimal (lower bound %.4g)", 100 * gap,
                choice.lower_bound);
  return buf;
}

BudgetProblem budget_problem(const Program& program, const PlannerOptions& options,
                             const OpCost& cost) {
  const Plan reference = make_reference_plan(program);
  const Schedule schedule = make_schedule(program, reference, /*with_backward=*/true);
  return make_budget_problem(program, schedule, replay_levels(program, reference, options),
                             step_bookings(program, cpu_backend()), booking_scale(program, options),
                             cost);
}

OpCost cost_model_from_config(const JobConfig& config, const Program& program, std::string* note) {
  if (config.activation_checkpoint.cost_model != "measured") {
    *note = "cost model: FLOPs";
    return flop_cost;
  }
  const OpTimes times = load_or_measure_op_times(config, program);
  *note = "cost model: measured op times on " + times.machine + " (" +
          (times.calibrated_now ? "calibrated now, saved to " : "cached in ") + times.path + ")";
  return measured_op_cost(times);
}

double recompute_cost(const Program& program, const Plan& plan, const OpCost& cost) {
  double total = 0;
  for (size_t n = 0; n < plan.recompute.size(); ++n) {
    if (plan.recompute[n]) total += cost(program.nodes[n]);
  }
  return total;
}

bool is_budget_fraction(const std::string& memory_budget) {
  char* end = nullptr;
  std::strtod(memory_budget.c_str(), &end);
  return end != memory_budget.c_str() && *end == '\0';
}

int64_t resolve_budget(const AcOptions& options, const JobConfig& config, const Program& program,
                       const PlannerOptions& planner, std::string* source) {
  if (options.mode == AcOptions::Mode::kAuto) {
    *source = config.memory.limit.empty() ? "physical RAM" : "memory.limit " + config.memory.limit;
    return available_memory(config);
  }
  *source = "memory_budget " + options.memory_budget;
  if (is_budget_fraction(options.memory_budget)) {
    const double fraction = std::strtod(options.memory_budget.c_str(), nullptr);
    // 0: full AC's peak, 1: no AC's, linear in between (spec.md §2).
    const int64_t full = peak_of_mode(program, AcOptions::Mode::kFull, planner);
    const int64_t none = peak_of_mode(program, AcOptions::Mode::kNone, planner);
    return full + static_cast<int64_t>(fraction * static_cast<double>(none - full));
  }
  return static_cast<int64_t>(parse_memory_size(options.memory_budget));
}

BudgetPlan make_budget_plan(const AcOptions& options, const JobConfig& config,
                            const Program& program, const PlannerOptions& planner) {
  const auto start = std::chrono::steady_clock::now();
  BudgetPlan result;
  result.budget = resolve_budget(options, config, program, planner, &result.budget_source);
  const OpCost cost = cost_model_from_config(config, program, &result.cost_note);
  result.cost_unit = config.activation_checkpoint.cost_model == "measured" ? "s" : "FLOPs";
  const BudgetProblem problem = budget_problem(program, planner, cost);
  result.choice = solve_budget(problem, result.budget);
  result.solve_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result.choice.feasible) {
    // The largest batch whose lowest reachable peak fits (monotone in batch).
    int64_t lo = 0, hi = program.batch - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      const Program smaller = build_model(config.model, mid, program.seq).program;
      if (min_peak(budget_problem(smaller, planner, flop_cost)) <= result.budget) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    std::string advice =
        lo >= 1 ? "training.local_batch_size = " + std::to_string(lo) + " would fit"
                : "no batch size fits at this seq_len; use a shorter sequence, sharding or more "
                  "memory";
    // The logits kept whole may be what does not fit: the fused loss head
    // at this batch, if it does.
    if (config.model.loss_chunk_rows == 0 &&
        program.batch * program.seq > kSuggestedLossChunkRows) {
      JobConfig::Model chunked = config.model;
      chunked.loss_chunk_rows = NumberOrAuto{static_cast<double>(kSuggestedLossChunkRows), false};
      const int64_t reach = min_peak(budget_problem(
          build_model(chunked, program.batch, program.seq).program, planner, flop_cost));
      if (reach <= result.budget) {
        advice = "model.loss_chunk_rows = " + std::to_string(kSuggestedLossChunkRows) +
                 " would fit at this batch (the loss head fused, its logits made that many "
                 "rows at a time; smallest peak " +
                 bytes_text(reach) + "), or " + advice;
      }
    }
    throw InputError("activation_checkpoint: no plan fits " + result.budget_source + " = " +
                     bytes_text(result.budget) + "; the smallest peak any plan reaches is " +
                     bytes_text(min_peak(problem)) + "; " + advice);
  }
  result.plan = plan_from_choice(problem, result.choice);
  result.plan.description = describe(options) + " (" + bytes_text(result.budget) +
                            "): " + result.certificate() + "; " + result.cost_note;
  return result;
}

AcOptions resolve_auto_threshold(const Program& program, AcOptions options,
                                 const PlannerOptions& planner, std::string* why) {
  if (!options.auto_threshold || options.mode != AcOptions::Mode::kSelectiveOp) return options;
  options.auto_threshold = false;
  std::vector<double> candidates = {0};
  for (const Node& node : program.nodes) {
    if (node.block >= 0 && op_info(node.kind).op_class == OpClass::kMatmul) {
      candidates.push_back(static_cast<double>(forward_flops(node)) + 1);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  struct Priced {
    double threshold;
    int64_t peak, recompute;
  };
  std::vector<Priced> priced;
  for (double t : candidates) {
    options.mm_flops_threshold = t;
    const Prediction p = predict(program, make_plan(program, options), planner);
    priced.push_back({t, p.peak_bytes, p.recompute_flops});
  }
  const Priced zero = priced.front();
  Priced best = zero;
  for (const Priced& c : priced) {
    if (c.peak > zero.peak || c.recompute > zero.recompute) continue;
    if (c.peak < best.peak || (c.peak == best.peak && c.recompute < best.recompute)) best = c;
  }
  options.mm_flops_threshold = best.threshold;
  std::set<std::string> taken_out;
  for (const Node& node : program.nodes) {
    if (node.block >= 0 && op_info(node.kind).op_class == OpClass::kMatmul &&
        static_cast<double>(forward_flops(node)) < best.threshold) {
      taken_out.insert(generalize_layer_index(node.fqn));
    }
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "threshold auto = %.4g: peak %s vs %s at threshold 0, recompute %.4g vs %.4g "
                "FLOPs (%zu thresholds priced); always recomputed, out of the alternation: ",
                best.threshold, format_bytes(best.peak).c_str(), format_bytes(zero.peak).c_str(),
                static_cast<double>(best.recompute), static_cast<double>(zero.recompute),
                priced.size());
  *why = buf;
  if (taken_out.empty()) *why += "none (no threshold beats 0 here)";
  for (auto it = taken_out.begin(); it != taken_out.end(); ++it) {
    *why += (it == taken_out.begin() ? "" : ", ") + *it;
  }
  return options;
}

}  // namespace remat
