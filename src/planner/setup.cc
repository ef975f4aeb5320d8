#include "planner/setup.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "ac/knapsack.h"
#include "core/error.h"
#include "core/format.h"
#include "planner/job_options.h"

namespace remat {

bool runs_bf16(const JobConfig& config, const PlannerOptions& planner) {
  return config.training.mixed_precision_param == "bfloat16" && planner.shard_degree <= 1;
}

AcChoice choose_ac_plan(const JobConfig& config, const Program& program,
                        const PlannerOptions& planner) {
  AcChoice c;
  c.options = resolve_auto_threshold(program, ac_options_from_config(config), planner, &c.auto_why);
  const AcOptions::Mode mode = c.options.mode;
  if (!c.auto_why.empty()) {
    c.plan = make_plan(program, c.options);
    c.plan.description += "; " + c.auto_why;
  } else if (mode == AcOptions::Mode::kMemoryBudget &&
             config.activation_checkpoint.budget_solver == "pytorch_knapsack") {
    c.plan =
        make_pytorch_knapsack_plan(program, std::strtod(c.options.memory_budget.c_str(), nullptr));
  } else if (mode == AcOptions::Mode::kMemoryBudget || mode == AcOptions::Mode::kAuto) {
    c.budget = make_budget_plan(c.options, config, program, planner);
    c.plan = c.budget->plan;
  } else {
    c.plan = make_plan(program, c.options);
  }
  return c;
}

namespace {

JobConfig with_loss_chunk_rows(const JobConfig& config, int64_t rows) {
  JobConfig c = config;
  c.model.loss_chunk_rows = NumberOrAuto{static_cast<double>(rows), false};
  return c;
}

Setup make_resolved_setup(const JobConfig& config, int64_t batch, Pass pass,
                          const PlannerOptions& planner) {
  Setup s{build_model(config.model, batch, config.training.seq_len), pass, AcChoice{}, 0, ""};
  s.loss_chunk_rows = static_cast<int64_t>(config.model.loss_chunk_rows.value);
  if (runs_bf16(config, planner)) set_compute_dtype(s.model.program, DType::kBF16);
  if (pass == Pass::kTraining) {
    s.ac = choose_ac_plan(config, s.model.program, planner);
  } else {
    s.ac.plan = make_inference_plan(s.model.program);
  }
  return s;
}

// A set-up, or the InputError that refused it (a budget no plan fits).
struct Attempt {
  std::optional<Setup> setup;
  std::string error;
};

Attempt attempt_setup(const JobConfig& config, int64_t batch, const PlannerOptions& planner) {
  try {
    return {make_resolved_setup(config, batch, Pass::kTraining, planner), ""};
  } catch (const InputError& e) {
    return {std::nullopt, e.what()};
  }
}

// What the chunked head's plan costs beyond its recompute: its backward
// rebuilds the logits, one more forward of the fused op.
double rebuilt_logits_cost(const Program& program, const OpCost& cost) {
  double total = 0;
  for (const Node& node : program.nodes) {
    if (op_info(node.kind).backward_recomputes_forward) total += cost(node);
  }
  return total;
}

std::string cost_text(double cost, const std::string& unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g %s", cost, unit.c_str());
  return buf;
}

// "memory_budget 0.5 (688.00MiB)", "memory.limit 2GiB (2.00GiB)".
std::string whole_budget_text(const JobConfig& config, int64_t bytes) {
  const auto& ac = config.activation_checkpoint;
  const std::string source =
      ac.mode == "auto"
          ? (config.memory.limit.empty() ? "physical RAM" : "memory.limit " + config.memory.limit)
          : "memory_budget " + ac.memory_budget;
  return source + " (" + format_bytes(bytes) + ")";
}

Setup choose_loss_head(const JobConfig& config, int64_t batch, const PlannerOptions& planner) {
  const std::string key = "model.loss_chunk_rows = \"auto\"";
  const int64_t chunk = kSuggestedLossChunkRows;
  Attempt whole = attempt_setup(with_loss_chunk_rows(config, 0), batch, planner);
  // A memory_budget fraction lies between full AC's peak and no AC's: of the
  // model with the logits whole, so that both heads face the same bytes.
  JobConfig fused_config = with_loss_chunk_rows(config, chunk);
  std::string& budget = fused_config.activation_checkpoint.memory_budget;
  const bool fraction = whole.setup && whole.setup->ac.budget &&
                        whole.setup->ac.options.mode == AcOptions::Mode::kMemoryBudget &&
                        is_budget_fraction(budget);
  if (fraction) budget = std::to_string(whole.setup->ac.budget->budget) + "B";
  Attempt fused = attempt_setup(fused_config, batch, planner);
  auto keep = [&](Attempt& a, const std::string& why) {
    a.setup->loss_head_why = why;
    return std::move(*a.setup);
  };
  const std::string fused_text = "fused with the loss, its logits " + std::to_string(chunk) +
                                 " rows at a time, rebuilt in the backward";
  // Neither fits: the chunked head's refusal, which names the smallest peak
  // and the largest batch this key can reach.
  if (!whole.setup && !fused.setup) throw InputError(fused.error);
  if (!fused.setup) return keep(whole, "logits whole (" + key + ")");
  if (!whole.setup) {
    return keep(fused, fused_text + " (" + key + ": no plan with the logits whole fits " +
                           whole_budget_text(config, fused.setup->ac.budget->budget) + ")");
  }
  if (whole.setup->ac.budget) {
    const BudgetPlan& w = *whole.setup->ac.budget;
    const BudgetPlan& f = *fused.setup->ac.budget;
    std::string note;
    const OpCost cost =
        cost_model_from_config(with_loss_chunk_rows(config, chunk), fused.setup->program(), &note);
    const double fused_cost = f.choice.cost + rebuilt_logits_cost(fused.setup->program(), cost);
    const std::string costs = "recompute " + cost_text(f.choice.cost, f.cost_unit) +
                              " + rebuilt logits " +
                              cost_text(fused_cost - f.choice.cost, f.cost_unit) + " fused vs " +
                              cost_text(w.choice.cost, w.cost_unit) + " whole";
    if (fused_cost < w.choice.cost) {
      return keep(fused, fused_text + " (" + key + ": both fit " +
                             whole_budget_text(config, w.budget) + "; " + costs + ")");
    }
    return keep(whole, "logits whole (" + key + ": both fit " +
                           whole_budget_text(config, w.budget) + "; " + costs + ")");
  }
  const int64_t available = available_memory(config);
  const int64_t whole_peak =
      predict(whole.setup->program(), whole.setup->ac.plan, planner).peak_bytes;
  const int64_t fused_peak =
      predict(fused.setup->program(), fused.setup->ac.plan, planner).peak_bytes;
  const std::string peaks = "peak " + format_bytes(fused_peak) + " fused vs " +
                            format_bytes(whole_peak) + " whole, " + format_bytes(available) +
                            " available";
  if (whole_peak > available && fused_peak < whole_peak) {
    return keep(fused, fused_text + " (" + key + ": the logits whole do not fit; " + peaks + ")");
  }
  return keep(whole, "logits whole (" + key + ": they fit; " + peaks + ")");
}

}  // namespace

Setup make_setup(const JobConfig& config, int64_t batch, Pass pass, const PlannerOptions& planner) {
  if (!config.model.loss_chunk_rows.automatic) {
    return make_resolved_setup(config, batch, pass, planner);
  }
  if (pass == Pass::kTraining && loss_head_candidates(config, batch).size() > 1) {
    return choose_loss_head(config, batch, planner);
  }
  Setup s = make_resolved_setup(with_loss_chunk_rows(config, 0), batch, pass, planner);
  s.loss_head_why = "logits whole (model.loss_chunk_rows = \"auto\": " +
                    std::string(pass == Pass::kTraining ? "one chunk would hold every row"
                                                        : "a forward-only pass") +
                    ")";
  return s;
}

std::vector<int64_t> loss_head_candidates(const JobConfig& config, int64_t batch) {
  const NumberOrAuto& rows = config.model.loss_chunk_rows;
  if (!rows.automatic) return {static_cast<int64_t>(rows.value)};
  if (batch * config.training.seq_len <= kSuggestedLossChunkRows) return {0};
  return {0, kSuggestedLossChunkRows};
}

JobConfig with_resolved_loss_head(const JobConfig& config, const Setup& setup) {
  return with_loss_chunk_rows(config, setup.loss_chunk_rows);
}

}  // namespace remat
