#include "planner/plan_command.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/format.h"
#include "models/registry.h"
#include "planner/budget_plan.h"
#include "planner/job_options.h"
#include "planner/op_timing.h"
#include "planner/pareto_output.h"
#include "planner/plan_report.h"
#include "planner/setup.h"
#include "planner/throughput.h"
#include "planner/timeline_output.h"

namespace remat {

namespace {

// Every comparison mode (planner.h) with its plan and the prediction for it.
struct ModeRow {
  NamedMode mode;
  Plan plan;
  Prediction prediction;
};

std::vector<ModeRow> predict_modes(const Program& program, const AcOptions& configured,
                                   const PlannerOptions& planner) {
  std::vector<ModeRow> rows;
  for (NamedMode& mode : comparison_modes(configured)) {
    Plan plan = make_plan(program, mode.options);
    Prediction p = predict(program, plan, planner);
    p.name = mode.name;
    rows.push_back({std::move(mode), std::move(plan), std::move(p)});
  }
  return rows;
}

// Of the modes whose peak fits in `available`, the one with the least
// recompute; null if none fits.
const Prediction* least_recompute_fitting(const std::vector<ModeRow>& rows, int64_t available) {
  const Prediction* best = nullptr;
  for (const ModeRow& row : rows) {
    const Prediction& q = row.prediction;
    if (q.peak_bytes <= available && (!best || q.recompute_flops < best->recompute_flops)) {
      best = &q;
    }
  }
  return best;
}

std::vector<AtFixed> budget_at_fixed_modes(const std::vector<ModeRow>& modes,
                                           const Program& program, const PlannerOptions& planner,
                                           const BudgetProblem& problem, const OpCost& cost) {
  std::vector<AtFixed> at_fixed;
  for (const ModeRow& row : modes) {
    const AcOptions::Mode m = row.mode.options.mode;
    if (m == AcOptions::Mode::kNone || m == AcOptions::Mode::kFull) continue;
    const BudgetChoice c = solve_budget(problem, row.prediction.peak_bytes);
    Prediction p = predict(program, plan_from_choice(problem, c), planner);
    p.name = "budget @ " + row.mode.name;
    at_fixed.push_back({row.prediction, p, recompute_cost(program, row.plan, cost), c.cost});
  }
  return at_fixed;
}

int run_maximize_throughput(const JobConfig& config, const PlannerOptions& planner, bool json) {
  const ThroughputSearch search = maximize_throughput(config, planner);
  const std::vector<ThroughputChoice>& choices = search.choices;
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const ThroughputChoice& c : choices) {
      j.push_back({{"local_batch_size", c.batch},
                   {"microbatches", c.microbatches},
                   {"loss_chunk_rows", c.loss_chunk_rows},
                   {"peak_bytes", c.peak_bytes},
                   {"recompute_seconds", c.recompute_seconds},
                   {"step_seconds", c.step_seconds},
                   {"tokens_per_second", c.tokens_per_second}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const bool fixed_global = config.training.global_batch_size != -1;
  const std::string global =
      fixed_global ? ", global batch " + std::to_string(config.training.global_batch_size) +
                         " (batch x micro x ranks; step s is one microbatch's)"
                   : "";
  std::printf("remat plan --maximize throughput: seq %lld, within %s%s; best first\n",
              static_cast<long long>(config.training.seq_len),
              format_bytes(available_memory(config)).c_str(), global.c_str());
  std::printf("  %6s  %s%12s  %14s  %12s  %14s  %s\n", "batch", fixed_global ? "micro  " : "",
              "peak", "recompute s", "step s", "tokens/s", "plan");
  for (size_t i = 0; i < choices.size() && i < 5; ++i) {
    const ThroughputChoice& c = choices[i];
    char micro[32] = "";
    if (fixed_global)
      std::snprintf(micro, sizeof micro, "%5lld  ", static_cast<long long>(c.microbatches));
    std::printf("  %6lld  %s%12s  %14.4f  %12.4f  %14.0f  %s\n", static_cast<long long>(c.batch),
                micro, format_bytes(c.peak_bytes).c_str(), c.recompute_seconds, c.step_seconds,
                c.tokens_per_second, c.plan.c_str());
  }
  std::printf("  (search ended %s)\n", search.ended.c_str());
  return 0;
}

std::optional<Prediction> chunked_loss_hint(const JobConfig& config, const PlanReport& r) {
  const auto& t = config.training;
  if (!(config.model.loss_chunk_rows == 0) ||
      t.local_batch_size * t.seq_len <= kPlanHintChunkRows) {
    return std::nullopt;
  }
  JobConfig chunked = config;
  chunked.model.loss_chunk_rows = NumberOrAuto{static_cast<double>(kPlanHintChunkRows), false};
  const Setup setup = make_setup(chunked, t.local_batch_size, Pass::kTraining, r.planner);
  Prediction p = predict(setup.program(), setup.ac.plan, r.planner);
  if (static_cast<double>(p.peak_bytes) > 0.99 * static_cast<double>(r.chosen.peak_bytes)) {
    return std::nullopt;
  }
  return p;
}

// The --pareto recompute axis: FLOPs as a share of the model's, or, under
// the measured cost model, seconds as a share of the predicted step that
// recomputes nothing (the op times are cached by now: no second calibration).
ParetoAxis pareto_axis(const JobConfig& config, const Program& program, const Prediction& any) {
  if (config.activation_checkpoint.cost_model != "measured") {
    return {"flops", static_cast<double>(any.model_flops), "model FLOPs"};
  }
  const OpTimes times = load_or_measure_op_times(config, program);
  AcOptions none;
  none.mode = AcOptions::Mode::kNone;
  return {"seconds", predicted_step_seconds(times, program, make_plan(program, none)),
          "a step without recompute"};
}

PlanReport make_report(const JobConfig& configured, const PlanCommandOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto& t = configured.training;
  PlanReport r;
  r.planner = planner_options_from_config(configured);
  const Setup setup = make_setup(configured, t.local_batch_size, Pass::kTraining, r.planner);
  r.loss_head_auto = configured.model.loss_chunk_rows.automatic;
  r.loss_chunk_rows = setup.loss_chunk_rows;
  r.loss_head_why = setup.loss_head_why;
  // Everything below prices the program the run builds: "auto" resolved.
  const JobConfig config = with_resolved_loss_head(configured, setup);
  r.model = setup.model;
  const Program& program = r.model.program;
  r.configured = setup.ac.options;
  r.auto_why = setup.ac.auto_why;
  r.budget_mode = (r.configured.mode == AcOptions::Mode::kMemoryBudget ||
                   r.configured.mode == AcOptions::Mode::kAuto) &&
                  config.activation_checkpoint.budget_solver == "remat";
  if (r.budget_mode) r.budget = *setup.ac.budget;
  r.configured_plan = setup.ac.plan;
  r.chosen = predict(program, r.configured_plan, r.planner);
  r.chosen.name = r.budget_mode ? describe(r.configured) : "configured";
  if (r.configured.mode == AcOptions::Mode::kMemoryBudget && !r.budget_mode) {
    r.chosen.name = "knapsack";
  }
  const std::vector<ModeRow> modes = predict_modes(program, r.configured, r.planner);
  r.cost = cost_model_from_config(config, program, &r.cost_note);
  r.measured = config.activation_checkpoint.cost_model == "measured";
  r.configured_row = modes.size();
  for (size_t i = 0; i < modes.size(); ++i) {
    r.rows.push_back(modes[i].prediction);
    r.row_costs.push_back(recompute_cost(program, modes[i].plan, r.cost));
    if (modes[i].mode.configured) r.configured_row = i;
  }
  if (r.configured_row == modes.size()) {  // a mode none of the rows runs
    r.rows.insert(r.rows.begin(), r.chosen);
    r.row_costs.insert(r.row_costs.begin(), recompute_cost(program, r.configured_plan, r.cost));
    r.configured_row = 0;
  }
  const BudgetProblem problem = budget_problem(program, r.planner, r.cost);
  r.at_fixed = budget_at_fixed_modes(modes, program, r.planner, problem, r.cost);
  if (!options.pareto_path.empty()) {
    r.front = pareto_front(problem, options.pareto_points);
    r.axis = pareto_axis(config, program, r.rows.front());
  }
  if (config.validation.enabled) {
    const Setup forward = make_setup(config, /*batch=*/1, Pass::kForwardOnly);
    r.validation = predict_validation(forward.program(), forward.ac.plan);
    r.cpu_training_peak = predict(program, r.configured_plan, PlannerOptions{}).peak_bytes;
  }
  r.chunked_loss = chunked_loss_hint(configured, r);  // none once "auto" has chosen
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

void write_pareto_file(const PlanReport& r, const PlanCommandOptions& options) {
  std::vector<ParetoMark> marks;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    marks.push_back({r.rows[i].name, r.rows[i].peak_bytes, r.row_costs[i]});
  }
  write_pareto(options.pareto_path, r.front, marks, r.budget_mode ? r.budget.budget : 0, r.axis,
               r.model.summary.family + " " + r.model.summary.flavor);
}

}  // namespace

int run_plan(JobConfig config, const PlanCommandOptions& options) {
  if (options.torchtitan) {
    // A key the command line sets is the user's, not the preset's.
    auto preset = [&](const char* key) { return !options.command_line_keys.contains(key); };
    if (preset("training.mixed_precision_param"))
      config.training.mixed_precision_param = "bfloat16";
    if (preset("parallelism.data_parallel_shard_degree") &&
        config.parallelism.data_parallel_shard_degree == 1) {
      config.parallelism.data_parallel_shard_degree = 8;
    }
    if (preset("memory.limit") && config.memory.limit.empty()) config.memory.limit = "80GiB";
  }
  // --maximize chooses the local batch: among those dividing a set global
  // batch (planner/throughput.h), whatever training.local_batch_size says.
  if (options.maximize_throughput) {
    return run_maximize_throughput(config, planner_options_from_config(config), options.json);
  }
  // A global batch the modelled ranks cannot split is refused before planning.
  gradient_accumulation_steps(config, data_parallel_ranks(config));
  // Checked again now that the inputs are known (the config file among
  // them): an output that is an input was found only when written, after
  // the other output had replaced its file.
  if (!options.pareto_path.empty()) check_pareto_path(options.pareto_path);
  if (!options.timeline_path.empty()) check_timeline_path(options.timeline_path);
  const PlanReport report = make_report(config, options);
  if (!options.pareto_path.empty()) write_pareto_file(report, options);
  if (!options.timeline_path.empty()) {
    const ModelSummary& s = report.model.summary;
    write_timelines(options.timeline_path, options.timeline_compare, report.model.program,
                    report.configured_plan, report.configured, report.planner,
                    s.family + " " + s.flavor);
  }
  if (options.json) {
    print_plan_json(report, config, options);
  } else {
    print_plan_text(report, config, options);
  }
  return 0;
}

void check_run_fits(const JobConfig& as_given, const Setup& setup) {
  const JobConfig config = with_resolved_loss_head(as_given, setup);
  const auto& t = config.training;
  const int64_t available = available_memory(config);
  PlannerOptions cpu;  // the CPU engine: fp32, one rank or sharded over the ranks
  cpu.shard_degree = config.parallelism.data_parallel_shard_degree;
  const BuiltModel& model = setup.model;
  const AcOptions configured = ac_options_from_config(config);
  const Prediction p = predict(model.program, setup.ac.plan, cpu);
  if (p.peak_bytes <= available) return;

  std::string advice;
  // No AC mode or batch size shrinks the model state: when it alone does not
  // fit, searching them would only take time (minutes for thousands of layers).
  if (p.state_bytes > available) {
    advice = "the model state alone (parameters, gradients, optimizer state" +
             std::string(cpu.shard_degree > 1 ? ", this rank's shards" : "") + ") takes " +
             format_bytes(p.state_bytes) + ", so no AC mode or batch size fits; use a smaller " +
             "model" + (cpu.shard_degree > 1 ? ", more shards" : "") + " or more memory";
  }
  const std::vector<ModeRow> modes =
      advice.empty() ? predict_modes(model.program, configured, cpu) : std::vector<ModeRow>{};
  if (const Prediction* best = least_recompute_fitting(modes, available)) {
    advice = "activation checkpointing \"" + best->mode + "\" would fit (peak " +
             format_bytes(best->peak_bytes) + ")";
  }
  // No mode fits at this batch size: the largest smaller batch that fits,
  // with the least recompute at that size.
  for (int64_t batch = t.local_batch_size / 2; batch >= 1 && advice.empty(); batch /= 2) {
    const BuiltModel smaller = build_model(config.model, batch, t.seq_len);
    const std::vector<ModeRow> rows = predict_modes(smaller.program, configured, cpu);
    if (const Prediction* q = least_recompute_fitting(rows, available)) {
      advice = "training.local_batch_size = " + std::to_string(batch) + " with \"" + q->mode +
               "\" would fit (peak " + format_bytes(q->peak_bytes) + ")";
    }
  }
  if (advice.empty()) advice = "no AC mode or batch size fits; use a smaller model or more memory";
  throw InputError("memory: the run needs " + format_bytes(p.peak_bytes) + " at its peak with \"" +
                   p.mode + "\" but " + format_bytes(available) + " is available (" +
                   (config.memory.limit.empty() ? "physical RAM" : "memory.limit") + "); " +
                   advice);
}

}  // namespace remat
