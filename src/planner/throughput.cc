#include "planner/throughput.h"

#include <algorithm>

#include "core/error.h"
#include "core/format.h"
#include "models/registry.h"
#include "planner/budget_plan.h"
#include "planner/job_options.h"
#include "planner/op_timing.h"
#include "planner/setup.h"

namespace remat {

namespace {

// 1, 2, 3, 4, 6, 8, 12, 16, ...: powers of two and the points between.
std::vector<int64_t> candidate_batches(int64_t most) {
  std::vector<int64_t> out;
  for (int64_t p = 1; p <= most; p *= 2) {
    out.push_back(p);
    if (p >= 2 && p + p / 2 <= most) out.push_back(p + p / 2);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// With training.global_batch_size set, the local batches that split it
// into whole microbatches over the ranks: the divisors of global / ranks,
// up to `most`.
std::vector<int64_t> dividing_batches(const JobConfig& config, int64_t most) {
  const int64_t ranks = data_parallel_ranks(config);
  const int64_t global = config.training.global_batch_size;
  if (global % ranks != 0) {
    throw InputError("--maximize throughput: training.global_batch_size = " +
                     std::to_string(global) + " is not a multiple of the " + std::to_string(ranks) +
                     " data-parallel ranks; expected one, or -1");
  }
  std::vector<int64_t> out;
  for (int64_t b = 1; b <= most && b <= global / ranks; ++b)
    if (global / ranks % b == 0) out.push_back(b);
  return out;
}

}  // namespace

bool ThroughputSaturation::saturated_after(double tokens_per_second) {
  if (tokens_per_second > best_ * (1 + kMinGain)) {
    without_gain_ = 0;
  } else {
    ++without_gain_;
  }
  best_ = std::max(best_, tokens_per_second);
  return without_gain_ >= kBatchesWithoutGain;
}

ThroughputSearch maximize_throughput(const JobConfig& config, const PlannerOptions& planner) {
  const int64_t device = available_memory(config);
  JobConfig measured = config;
  measured.activation_checkpoint.cost_model = "measured";
  std::vector<ThroughputChoice> choices;
  constexpr int64_t kMostBatch = 256;
  // A set global batch fixes the sequences per step: the candidates are the
  // local batches it divides into (as many microbatches as it takes).
  const bool fixed_global = config.training.global_batch_size != -1;
  const std::vector<int64_t> batches =
      fixed_global ? dividing_batches(config, kMostBatch) : candidate_batches(kMostBatch);
  ThroughputSaturation saturation;
  std::string ended = "after the last candidate batch";
  for (int64_t batch : batches) {
    // model.loss_chunk_rows = "auto": each head it weighs, its own row.
    bool any_fits = false;
    double batch_best = 0;
    for (const int64_t rows : loss_head_candidates(config, batch)) {
      JobConfig head = measured;
      head.model.loss_chunk_rows = NumberOrAuto{static_cast<double>(rows), false};
      Program program = build_model(head.model, batch, config.training.seq_len).program;
      if (runs_bf16(config, planner)) set_compute_dtype(program, DType::kBF16);  // as make_setup
      // The lowest peak only grows with the batch: stop at the first that
      // no head fits, before calibrating it.
      if (min_peak(budget_problem(program, planner, [](const Node&) { return 0.0; })) > device) {
        continue;
      }
      any_fits = true;
      const OpTimes times = load_or_measure_op_times(head, program);
      const BudgetProblem problem = budget_problem(program, planner, measured_op_cost(times));
      const BudgetChoice c = solve_budget(problem, device);
      const Plan plan = plan_from_choice(problem, c);
      ThroughputChoice t;
      t.batch = batch;
      t.microbatches =
          fixed_global ? config.training.global_batch_size / (batch * data_parallel_ranks(config))
                       : 1;
      t.loss_chunk_rows = rows;
      t.peak_bytes = c.peak;
      t.recompute_seconds = c.cost;
      t.step_seconds = predicted_step_seconds(times, program, plan);
      t.tokens_per_second = static_cast<double>(batch * config.training.seq_len) / t.step_seconds;
      t.plan = c.lower_bound >= c.cost ? "memory_budget (optimal)" : "memory_budget (bounded)";
      if (config.model.loss_chunk_rows.automatic) {
        t.plan +=
            rows > 0 ? ", loss head in " + std::to_string(rows) + "-row chunks" : ", logits whole";
      }
      batch_best = std::max(batch_best, t.tokens_per_second);
      choices.push_back(t);
    }
    if (!any_fits) {
      ended = "at batch " + std::to_string(batch) + ", whose lowest peak exceeds the memory";
      break;
    }
    // Within a memory.limit the user bounded the search: every batch that
    // fits is priced. Against all of RAM, it ends where tokens/s levels off.
    if (config.memory.limit.empty() && saturation.saturated_after(batch_best)) {
      ended = "at batch " + std::to_string(batch) + ": " +
              std::to_string(ThroughputSaturation::kBatchesWithoutGain) +
              " batches in a row gained no tokens/s over the best";
      break;
    }
  }
  if (choices.empty()) {
    throw InputError("--maximize throughput: not even local_batch_size = 1 fits " +
                     format_bytes(device) + " at seq_len " +
                     std::to_string(config.training.seq_len));
  }
  std::sort(choices.begin(), choices.end(),
            [](const ThroughputChoice& a, const ThroughputChoice& b) {
              return a.tokens_per_second > b.tokens_per_second;
            });
  return {choices, ended};
}

}  // namespace remat
