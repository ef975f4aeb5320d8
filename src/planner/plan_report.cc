#include "planner/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "ac/report.h"
#include "core/format.h"
#include "kernels/cpu/bf16.h"
#include "planner/explain.h"
#include "planner/job_options.h"
#include "planner/setup.h"
#include "planner/throughput.h"

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

}  // namespace

void print_plan_json(const PlanReport& r, const JobConfig& config,
                     const PlanCommandOptions& options) {
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
  // The CPU engine's bf16 GEMM path, whose copies the plan books; null
  // where the plan is fp32 or priced for sharded devices.
  j["run"]["bf16_matmuls"] = runs_bf16(config, r.planner)
                                 ? nlohmann::json(cpu::to_string(cpu::bf16_gemm()))
                                 : nlohmann::json(nullptr);
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
    j["chunked_loss_hint"] = {{"loss_chunk_rows", kPlanHintChunkRows},
                              {"peak_bytes", r.chunked_loss->peak_bytes},
                              {"recompute_flops", r.chunked_loss->recompute_flops}};
  }
  std::printf("%s\n", j.dump(2).c_str());
}

void print_plan_text(const PlanReport& r, const JobConfig& config,
                     const PlanCommandOptions& options) {
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
  if (runs_bf16(config, planner)) {
    // The bookings differ by path (bf16 weight and gradient copies exist
    // only where the GEMM takes bf16 operands), and the path by CPU.
    std::printf("  bf16 matmuls on %s, as `remat train` on this CPU runs them\n",
                cpu::to_string(cpu::bf16_gemm()));
  }
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
        static_cast<long long>(kPlanHintChunkRows), static_cast<long long>(kPlanHintChunkRows),
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

}  // namespace remat
