#include "planner/plan_command.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "ac/report.h"
#include "planner/budget_plan.h"
#include "planner/explain.h"
#include "planner/pareto_output.h"
#include "planner/timeline_output.h"
#include "planner/throughput.h"
#include "core/error.h"
#include "models/registry.h"
#include "train/metrics.h"

namespace remat {

namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

nlohmann::json to_json(const Prediction& p) {
  nlohmann::json at_peak;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    at_peak[to_string(static_cast<MemoryCategory>(c))] = p.at_peak.bytes[c];
  }
  return {{"name", p.name},
          {"mode", p.mode},
          {"peak_bytes", p.peak_bytes},
          {"at_peak", at_peak},
          {"peak_during", p.peak_during},
          {"kept_activation_bytes", p.kept_activation_bytes},
          {"model_flops", p.model_flops},
          {"recompute_flops", p.recompute_flops},
          {"fits", p.fits},
          {"warnings", p.warnings}};
}

std::string format_table(const std::vector<Prediction>& rows, const std::string& configured) {
  size_t mode_width = 4;
  for (const Prediction& p : rows) mode_width = std::max(mode_width, p.name.size());
  std::string out;
  char line[1024];
  std::snprintf(line, sizeof line,
                "  %-*s  %9s  %9s  %9s  %9s  %11s  %11s  %9s  %11s  %11s  %-s\n",
                static_cast<int>(mode_width), "mode", "peak GiB", "params", "grads", "optimizer",
                "activations", "temporaries", "kept act.", "model TFLOP", "recomp TFLOP",
                "peak during");
  out += line;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Prediction& p = rows[i];
    const auto& b = p.at_peak;
    std::snprintf(line, sizeof line,
                  "%c %-*s  %9s  %9s  %9s  %9s  %11s  %11s  %9s  %11.3f  %11.3f  %s%s\n",
                  p.mode == configured ? '*' : ' ', static_cast<int>(mode_width), p.name.c_str(),
                  gib(p.peak_bytes).c_str(), gib(b[MemoryCategory::kParameters]).c_str(),
                  gib(b[MemoryCategory::kGradients]).c_str(),
                  gib(b[MemoryCategory::kOptimizerState]).c_str(),
                  gib(b[MemoryCategory::kActivations]).c_str(),
                  gib(b[MemoryCategory::kTemporaries]).c_str(),
                  gib(p.kept_activation_bytes).c_str(), static_cast<double>(p.model_flops) / 1e12,
                  static_cast<double>(p.recompute_flops) / 1e12, p.peak_during.c_str(),
                  p.fits ? "" : "  (does not fit)");
    out += line;
  }
  return out;
}

}  // namespace

PlannerOptions planner_options_from_config(const JobConfig& config) {
  PlannerOptions o;
  o.shard_degree = config.parallelism.data_parallel_shard_degree;
  o.bf16_compute = config.training.mixed_precision_param == "bfloat16";
  o.device_memory = config.memory.limit.empty()
                        ? 0
                        : static_cast<int64_t>(parse_memory_size(config.memory.limit));
  return o;
}

namespace {

// The budget plan at the peak of each fixed mode (selective 2, the op
// modes): the least recompute within the same peak, never more.
struct AtFixed {
  Prediction fixed, budget;
  double fixed_cost, budget_cost;  // under the configured cost model
};

std::vector<AtFixed> budget_at_fixed_modes(const Program& program, const AcOptions& configured,
                                           const PlannerOptions& planner,
                                           const BudgetProblem& problem, const OpCost& cost) {
  std::vector<AtFixed> at_fixed;
  for (const NamedMode& mode : comparison_modes(configured)) {
    if (mode.name == "none" || mode.name == "full") continue;
    const Plan fixed_plan = make_plan(program, mode.options);
    Prediction fixed = predict(program, fixed_plan, planner);
    fixed.name = mode.name;
    const BudgetChoice c = solve_budget(problem, fixed.peak_bytes);
    Prediction p = predict(program, plan_from_choice(problem, c), planner);
    p.name = "budget @ " + mode.name;
    at_fixed.push_back({fixed, p, recompute_cost(program, fixed_plan, cost), c.cost});
  }
  return at_fixed;
}

void print_budget_report(const BudgetPlan* budget, const std::vector<AtFixed>& at_fixed,
                         const std::string& cost_note, const char* unit) {
  if (budget == nullptr) {
    std::printf("  %s\n", cost_note.c_str());
  } else {
    std::printf("  budget plan: solved in %.3f s, predicted peak %s, recompute %.4g %s, %s\n",
                budget->solve_seconds, format_bytes(budget->choice.peak).c_str(),
                budget->choice.cost, budget->cost_unit.c_str(), budget->certificate().c_str());
  }
  std::printf("  the budget plan at each fixed mode's peak (least recompute within it, in %s):\n",
              unit);
  for (const AtFixed& a : at_fixed) {
    std::printf("    %-18s peak %8s GiB  recompute %10.4g  -> budget: peak %8s GiB  recompute "
                "%10.4g  (%+.1f%%)\n",
                a.fixed.name.c_str(), gib(a.fixed.peak_bytes).c_str(), a.fixed_cost,
                gib(a.budget.peak_bytes).c_str(), a.budget_cost,
                a.fixed_cost > 0 ? 100.0 * (a.budget_cost - a.fixed_cost) / a.fixed_cost : 0.0);
  }
}

int run_maximize_throughput(const JobConfig& config, const PlannerOptions& planner, bool json) {
  const std::vector<ThroughputChoice> choices = maximize_throughput(config, planner);
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const ThroughputChoice& c : choices) {
      j.push_back({{"local_batch_size", c.batch},
                   {"peak_bytes", c.peak_bytes},
                   {"recompute_seconds", c.recompute_seconds},
                   {"step_seconds", c.step_seconds},
                   {"tokens_per_second", c.tokens_per_second}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("remat plan --maximize throughput: seq %lld, within %s; best first\n",
              static_cast<long long>(config.training.seq_len),
              format_bytes(planner.device_memory > 0 ? planner.device_memory
                                                     : physical_memory_bytes())
                  .c_str());
  std::printf("  %6s  %12s  %14s  %12s  %14s  %s\n", "batch", "peak", "recompute s", "step s",
              "tokens/s", "plan");
  for (size_t i = 0; i < choices.size() && i < 5; ++i) {
    const ThroughputChoice& c = choices[i];
    std::printf("  %6lld  %12s  %14.4f  %12.4f  %14.0f  %s\n", static_cast<long long>(c.batch),
                format_bytes(c.peak_bytes).c_str(), c.recompute_seconds, c.step_seconds,
                c.tokens_per_second, c.plan.c_str());
  }
  return 0;
}

}  // namespace

int run_plan(JobConfig config, const PlanCommandOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.torchtitan) {
    config.training.mixed_precision_param = "bfloat16";
    if (config.parallelism.data_parallel_shard_degree == 1) {
      config.parallelism.data_parallel_shard_degree = 8;
    }
    if (config.memory.limit.empty()) config.memory.limit = "80GiB";
  }
  const auto& t = config.training;
  if (options.maximize_throughput) {
    return run_maximize_throughput(config, planner_options_from_config(config), options.json);
  }
  const PlannerOptions planner = planner_options_from_config(config);
  const Setup setup = make_setup(config, t.local_batch_size, Pass::kTraining, planner);
  const BuiltModel& model = setup.model;
  const AcOptions& configured = setup.ac.options;
  const std::string& auto_why = setup.ac.auto_why;

  const bool budget_mode = (configured.mode == AcOptions::Mode::kMemoryBudget ||
                            configured.mode == AcOptions::Mode::kAuto) &&
                           config.activation_checkpoint.budget_solver == "remat";
  const BudgetPlan budget = budget_mode ? *setup.ac.budget : BudgetPlan{};
  const Plan& configured_plan = setup.ac.plan;
  Prediction chosen = predict(model.program, configured_plan, planner);
  chosen.name = budget_mode ? describe(configured) : "configured";
  if (configured.mode == AcOptions::Mode::kMemoryBudget && !budget_mode) chosen.name = "knapsack";
  std::vector<Prediction> rows;
  bool listed = false;
  for (const NamedMode& mode : comparison_modes(configured)) {
    rows.push_back(predict(model.program, make_plan(model.program, mode.options), planner));
    rows.back().name = mode.name;
    listed = listed || rows.back().mode == chosen.mode;
  }
  if (!listed) rows.insert(rows.begin(), chosen);
  // The budget plan at the peak of each fixed mode: never more recompute.
  std::string cost_note;
  const OpCost cost = cost_model_from_config(config, model.program, &cost_note);
  const bool measured = config.activation_checkpoint.cost_model == "measured";
  const BudgetProblem problem = budget_problem(model.program, planner, cost);
  const std::vector<AtFixed> at_fixed =
      budget_at_fixed_modes(model.program, configured, planner, problem, cost);
  std::vector<BudgetChoice> front;
  if (!options.pareto_path.empty()) front = pareto_front(problem, options.pareto_points);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!options.pareto_path.empty()) {
    std::vector<ParetoMark> marks;
    for (const Prediction& p : rows) {
      marks.push_back({p.name, p.peak_bytes, static_cast<double>(p.recompute_flops)});
    }
    const double model_flops = static_cast<double>(rows.front().model_flops);
    write_pareto(options.pareto_path, front, marks,
                 budget_mode ? budget.budget : 0, model_flops,
                 model.summary.family + " " + model.summary.flavor);
  }

  if (!options.timeline_path.empty()) {
    write_timelines(options.timeline_path, options.timeline_compare, model.program,
                    configured_plan, configured, planner,
                    model.summary.family + " " + model.summary.flavor);
  }

  const ModelSummary& s = model.summary;
  if (options.json) {
    nlohmann::json j;
    j["model"] = {{"family", s.family},     {"flavor", s.flavor},
                  {"params", s.params},     {"active_params", s.active_params},
                  {"layers", s.n_layers},   {"vocab_size", s.vocab_size},
                  {"embedding_params", s.embedding_params},
                  {"flops_per_token",
                   model_flops_per_token(s.active_params, s.embedding_params, s.attention_term,
                                         t.seq_len)}};
    j["run"] = {{"local_batch_size", t.local_batch_size},
                {"seq_len", t.seq_len},
                {"data_parallel_shard_degree", planner.shard_degree},
                {"compute_dtype", planner.bf16_compute ? "bfloat16" : "float32"},
                {"device_memory_bytes", planner.device_memory}};
    j["configured"] = to_json(chosen);
    if (budget_mode) {
      j["budget"] = {{"budget_bytes", budget.budget},
                     {"source", budget.budget_source},
                     {"predicted_peak_bytes", budget.choice.peak},
                     {"recompute_flops", budget.choice.cost},
                     {"lower_bound", budget.choice.lower_bound},
                     {"optimal", budget.optimal()},
                     {"seconds", budget.solve_seconds}};
    }
    j["budget_at_fixed_modes"] = nlohmann::json::array();
    j["cost_model"] = cost_note;
    j["auto_threshold"] = auto_why;
    for (const AtFixed& a : at_fixed) {
      j["budget_at_fixed_modes"].push_back({{"mode", a.fixed.name},
                                            {"fixed_peak_bytes", a.fixed.peak_bytes},
                                            {"fixed_recompute_flops", a.fixed.recompute_flops},
                                            {"fixed_cost", a.fixed_cost},
                                            {"budget_peak_bytes", a.budget.peak_bytes},
                                            {"budget_recompute_flops", a.budget.recompute_flops},
                                            {"budget_cost", a.budget_cost}});
    }
    j["modes"] = nlohmann::json::array();
    for (const Prediction& p : rows) j["modes"].push_back(to_json(p));
    if (options.matmuls) {
      j["matmul_table"] = format_matmul_table(model.program, make_plan(model.program, configured), true);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("remat plan: %s %s, %s parameters, batch %lld x seq %lld per device\n",
              s.family.c_str(), s.flavor.c_str(), with_thousands(s.params).c_str(),
              static_cast<long long>(t.local_batch_size), static_cast<long long>(t.seq_len));
  std::printf("  compute %s (master weights, gradients, optimizer state fp32), "
              "sharded over %lld ranks%s%s\n",
              planner.bf16_compute ? "bf16" : "fp32",
              static_cast<long long>(planner.shard_degree),
              planner.device_memory > 0 ? ", device memory " : "",
              planner.device_memory > 0 ? format_bytes(planner.device_memory).c_str() : "");
  std::printf("  memory at the peak moment, per device (GiB); * = the configured mode\n");
  std::fputs(format_table(rows, chosen.mode).c_str(), stdout);
  std::printf("  configured: %s\n", chosen.mode.c_str());
  print_budget_report(budget_mode ? &budget : nullptr, at_fixed, cost_note,
                      measured ? "s" : "FLOPs");
  if (!options.pareto_path.empty()) {
    std::printf("  pareto front: %zu points written to %s\n", front.size(),
                options.pareto_path.c_str());
  }
  if (!options.timeline_path.empty())
    std::printf("  memory timeline written to %s\n", options.timeline_path.c_str());
  if (options.explain) {
    std::fputs(explain_plan(model.program, configured_plan, planner, cost, measured ? "s" : "FLOPs")
                   .c_str(),
               stdout);
  }
  for (const std::string& w : chosen.warnings) std::printf("warning: %s\n", w.c_str());
  if (options.matmuls) {
    std::fputs(format_matmul_table(model.program, make_plan(model.program, configured), true).c_str(),
               stdout);
  }
  std::printf("(planned in %.3f s without allocating the model)\n", seconds);
  return 0;
}

void check_run_fits(const JobConfig& config, const Setup& setup) {
  const auto& t = config.training;
  const int64_t available = config.memory.limit.empty()
                                ? physical_memory_bytes()
                                : static_cast<int64_t>(parse_memory_size(config.memory.limit));
  PlannerOptions cpu;  // the CPU engine: fp32, one rank
  const BuiltModel& model = setup.model;
  const AcOptions configured = ac_options_from_config(config);
  const Prediction p = predict(model.program, setup.ac.plan, cpu);
  if (p.peak_bytes <= available) return;

  std::string advice;
  // The mode with the least recompute that fits, in order of recompute cost.
  const Prediction* best = nullptr;
  std::vector<Prediction> predictions;
  for (const NamedMode& mode : comparison_modes(configured)) {
    predictions.push_back(predict(model.program, make_plan(model.program, mode.options), cpu));
  }
  for (const Prediction& q : predictions) {
    if (q.peak_bytes <= available && (!best || q.recompute_flops < best->recompute_flops)) best = &q;
  }
  if (best) {
    advice = "activation checkpointing \"" + best->mode + "\" would fit (peak " +
             format_bytes(best->peak_bytes) + ")";
  } else {
    // No mode fits at this batch size: the largest smaller batch that fits,
    // with the least recompute at that size.
    for (int64_t batch = t.local_batch_size / 2; batch >= 1 && advice.empty(); batch /= 2) {
      BuiltModel smaller = build_model(config.model, batch, t.seq_len);
      for (const NamedMode& mode : comparison_modes(configured)) {
        const Prediction q =
            predict(smaller.program, make_plan(smaller.program, mode.options), cpu);
        if (q.peak_bytes <= available) {
          advice = "training.local_batch_size = " + std::to_string(batch) + " with \"" +
                   q.mode + "\" would fit (peak " + format_bytes(q.peak_bytes) + ")";
          break;
        }
      }
    }
  }
  if (advice.empty()) advice = "no AC mode or batch size fits; use a smaller model or more memory";
  throw InputError("memory: the run needs " + format_bytes(p.peak_bytes) + " at its peak with \"" +
                   p.mode + "\" but " + format_bytes(available) + " is available (" +
                   (config.memory.limit.empty() ? "physical RAM" : "memory.limit") + "); " + advice);
}

}  // namespace remat
