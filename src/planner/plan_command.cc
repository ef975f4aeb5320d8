#include "planner/plan_command.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "ac/report.h"
#include "core/error.h"
#include "core/format.h"
#include "models/registry.h"
#include "planner/budget_plan.h"
#include "planner/explain.h"
#include "planner/job_options.h"
#include "planner/op_timing.h"
#include "planner/pareto_output.h"
#include "planner/setup.h"
#include "planner/throughput.h"
#include "planner/timeline_output.h"

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

// `configured`: the row to star (the configured mode's).
std::string format_table(const std::vector<Prediction>& rows, size_t configured) {
  size_t mode_width = 4;
  for (const Prediction& p : rows) mode_width = std::max(mode_width, p.name.size());
  std::string out;
  char line[1024];
  std::snprintf(line, sizeof line, "  %-*s  %9s  %9s  %9s  %9s  %11s  %11s  %9s  %11s  %11s  %-s\n",
                static_cast<int>(mode_width), "mode", "peak GiB", "params", "grads", "optimizer",
                "activations", "temporaries", "kept act.", "model TFLOP", "recomp TFLOP",
                "peak during");
  out += line;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Prediction& p = rows[i];
    const auto& b = p.at_peak;
    std::snprintf(
        line, sizeof line, "%c %-*s  %9s  %9s  %9s  %9s  %11s  %11s  %9s  %11.3f  %11.3f  %s%s\n",
        i == configured ? '*' : ' ', static_cast<int>(mode_width), p.name.c_str(),
        gib(p.peak_bytes).c_str(), gib(b[MemoryCategory::kParameters]).c_str(),
        gib(b[MemoryCategory::kGradients]).c_str(), gib(b[MemoryCategory::kOptimizerState]).c_str(),
        gib(b[MemoryCategory::kActivations]).c_str(), gib(b[MemoryCategory::kTemporaries]).c_str(),
        gib(p.kept_activation_bytes).c_str(), static_cast<double>(p.model_flops) / 1e12,
        static_cast<double>(p.recompute_flops) / 1e12, p.peak_during.c_str(),
        p.fits ? "" : "  (does not fit)");
    out += line;
  }
  return out;
}

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

// The budget plan at the peak of each fixed mode (selective 2, the op
// modes): the least recompute within the same peak, never more.
struct AtFixed {
  Prediction fixed, budget;
  double fixed_cost, budget_cost;  // under the configured cost model
};

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
    std::printf(
        "    %-18s peak %8s GiB  recompute %10.4g  -> budget: peak %8s GiB  recompute "
        "%10.4g  (%+.1f%%)\n",
        a.fixed.name.c_str(), gib(a.fixed.peak_bytes).c_str(), a.fixed_cost,
        gib(a.budget.peak_bytes).c_str(), a.budget_cost,
        a.fixed_cost > 0 ? 100.0 * (a.budget_cost - a.fixed_cost) / a.fixed_cost : 0.0);
  }
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

constexpr int64_t kHintChunkRows = kSuggestedLossChunkRows;

std::optional<Prediction> chunked_loss_hint(const JobConfig& config, const PlanReport& r) {
  const auto& t = config.training;
  if (!(config.model.loss_chunk_rows == 0) || t.local_batch_size * t.seq_len <= kHintChunkRows) {
    return std::nullopt;
  }
  JobConfig chunked = config;
  chunked.model.loss_chunk_rows = NumberOrAuto{static_cast<double>(kHintChunkRows), false};
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

void print_json(const PlanReport& r, const JobConfig& config, const PlanCommandOptions& options) {
  const ModelSummary& s = r.model.summary;
  const auto& t = config.training;
  nlohmann::json j;
  j["model"] = {{"family", s.family},
                {"flavor", s.flavor},
                {"params", s.params},
                {"active_params", s.active_params},
                {"layers", s.n_layers},
                {"vocab_size", s.vocab_size},
                {"embedding_params", s.embedding_params},
                {"flops_per_token", model_flops_per_token(s, t.seq_len)}};
  j["run"] = {{"local_batch_size", t.local_batch_size},
              {"microbatches", gradient_accumulation_steps(config, data_parallel_ranks(config))},
              {"seq_len", t.seq_len},
              {"data_parallel_shard_degree", r.planner.shard_degree},
              {"compute_dtype", r.planner.bf16_compute ? "bfloat16" : "float32"},
              {"device_memory_bytes", r.planner.device_memory}};
  j["configured"] = to_json(r.chosen);
  if (r.budget_mode) {
    j["budget"] = {{"budget_bytes", r.budget.budget},
                   {"source", r.budget.budget_source},
                   {"predicted_peak_bytes", r.budget.choice.peak},
                   {"recompute_flops", r.budget.choice.cost},
                   {"lower_bound", r.budget.choice.lower_bound},
                   {"optimal", r.budget.optimal()},
                   {"seconds", r.budget.solve_seconds}};
  }
  j["budget_at_fixed_modes"] = nlohmann::json::array();
  j["cost_model"] = r.cost_note;
  j["auto_threshold"] = r.auto_why;
  for (const AtFixed& a : r.at_fixed) {
    j["budget_at_fixed_modes"].push_back({{"mode", a.fixed.name},
                                          {"fixed_peak_bytes", a.fixed.peak_bytes},
                                          {"fixed_recompute_flops", a.fixed.recompute_flops},
                                          {"fixed_cost", a.fixed_cost},
                                          {"budget_peak_bytes", a.budget.peak_bytes},
                                          {"budget_recompute_flops", a.budget.recompute_flops},
                                          {"budget_cost", a.budget_cost}});
  }
  j["modes"] = nlohmann::json::array();
  for (const Prediction& p : r.rows) j["modes"].push_back(to_json(p));
  if (r.validation) {
    j["validation"] = {{"freq", config.validation.freq},
                       {"local_batch_size", 1},
                       {"mode", r.validation->mode},
                       {"peak_bytes", r.validation->peak_bytes},
                       {"training_peak_bytes", r.cpu_training_peak}};
  }
  if (options.matmuls) {
    j["matmul_table"] = format_matmul_table(r.model.program, r.configured_plan, true);
  }
  j["loss_head"] = {{"loss_chunk_rows", r.loss_chunk_rows}, {"auto", r.loss_head_auto}};
  if (r.loss_head_auto) j["loss_head"]["why"] = r.loss_head_why;
  j["chunked_loss_hint"] = nullptr;
  if (r.chunked_loss) {
    j["chunked_loss_hint"] = {{"loss_chunk_rows", kHintChunkRows},
                              {"peak_bytes", r.chunked_loss->peak_bytes},
                              {"recompute_flops", r.chunked_loss->recompute_flops}};
  }
  std::printf("%s\n", j.dump(2).c_str());
}

void print_text(const PlanReport& r, const JobConfig& config, const PlanCommandOptions& options) {
  const ModelSummary& s = r.model.summary;
  const PlannerOptions& planner = r.planner;
  std::printf("remat plan: %s %s, %s parameters, batch %lld x seq %lld per device\n",
              s.family.c_str(), s.flavor.c_str(), with_thousands(s.params).c_str(),
              static_cast<long long>(config.training.local_batch_size),
              static_cast<long long>(config.training.seq_len));
  const int64_t microbatches = gradient_accumulation_steps(config, data_parallel_ranks(config));
  if (microbatches > 1) {
    std::printf(
        "  gradient accumulation: %lld microbatches per step (training.global_batch_size %lld); "
        "the figures are one microbatch's, which every microbatch repeats\n",
        static_cast<long long>(microbatches),
        static_cast<long long>(config.training.global_batch_size));
  }
  std::printf(
      "  compute %s (master weights, gradients, optimizer state fp32), "
      "sharded over %lld ranks%s%s\n",
      planner.bf16_compute ? "bf16" : "fp32", static_cast<long long>(planner.shard_degree),
      planner.device_memory > 0 ? ", device memory " : "",
      planner.device_memory > 0 ? format_bytes(planner.device_memory).c_str() : "");
  std::printf("  memory at the peak moment, per device (GiB); * = the configured mode\n");
  std::fputs(format_table(r.rows, r.configured_row).c_str(), stdout);
  std::printf("  configured: %s\n", r.chosen.mode.c_str());
  if (r.loss_head_auto) std::printf("  loss head: %s\n", r.loss_head_why.c_str());
  if (r.validation) {
    std::printf(
        "  validation every %lld steps (forward only, batch 1, %s): peak %s (%lld bytes) on the "
        "CPU engine, training step %s (%lld bytes)\n",
        static_cast<long long>(config.validation.freq), r.validation->mode.c_str(),
        format_bytes(r.validation->peak_bytes).c_str(),
        static_cast<long long>(r.validation->peak_bytes), format_bytes(r.cpu_training_peak).c_str(),
        static_cast<long long>(r.cpu_training_peak));
  }
  if (r.chunked_loss) {
    const double saved = 1.0 - static_cast<double>(r.chunked_loss->peak_bytes) /
                                   static_cast<double>(r.chosen.peak_bytes);
    // A budget mode may re-plan the blocks with the room the logits leave:
    // the difference can go either way.
    const double extra =
        static_cast<double>(r.chunked_loss->recompute_flops - r.chosen.recompute_flops) / 1e12;
    std::printf(
        "  hint: model.loss_chunk_rows = %lld (the loss head fused, its logits made %lld rows at "
        "a time) plans %s GiB, %.1f%% below the configured peak, with %.3f TFLOP %s "
        "recompute per step\n",
        static_cast<long long>(kHintChunkRows), static_cast<long long>(kHintChunkRows),
        gib(r.chunked_loss->peak_bytes).c_str(), 100.0 * saved, extra < 0 ? -extra : extra,
        extra < 0 ? "less" : "more");
  }
  const char* unit = r.measured ? "s" : "FLOPs";
  print_budget_report(r.budget_mode ? &r.budget : nullptr, r.at_fixed, r.cost_note, unit);
  if (!options.pareto_path.empty()) {
    std::printf("  pareto front: %zu points written to %s\n", r.front.size(),
                options.pareto_path.c_str());
  }
  if (!options.timeline_path.empty())
    std::printf("  memory timeline written to %s\n", options.timeline_path.c_str());
  if (options.explain) {
    std::fputs(explain_plan(r.model.program, r.configured_plan, planner, r.cost, unit).c_str(),
               stdout);
  }
  for (const std::string& w : r.chosen.warnings) std::printf("warning: %s\n", w.c_str());
  if (options.matmuls) {
    std::fputs(format_matmul_table(r.model.program, r.configured_plan, true).c_str(), stdout);
  }
  std::printf("(planned in %.3f s without allocating the model)\n", r.seconds);
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
    print_json(report, config, options);
  } else {
    print_text(report, config, options);
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
