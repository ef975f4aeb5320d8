#include "planner/job_options.h"

#include <charconv>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/host_memory.h"

namespace remat {

AcOptions ac_options_from_config(const JobConfig& config) {
  const auto& ac = config.activation_checkpoint;
  AcOptions options;
  // "auto" is resolved by the planner (planner/budget_plan.h), which prices
  // candidate thresholds; until then it behaves as 0.
  options.mm_flops_threshold = ac.selective_op_ac_mm_flops_threshold.value;
  options.auto_threshold = ac.selective_op_ac_mm_flops_threshold.automatic;
  options.force_recompute_fqns = ac.per_op_sac_force_recompute_mm_by_fqns;
  if (ac.mode == "none") {
    options.mode = AcOptions::Mode::kNone;
  } else if (ac.mode == "full") {
    options.mode = AcOptions::Mode::kFull;
  } else if (ac.mode == "selective") {
    if (ac.selective_ac_option == "op") {
      options.mode = AcOptions::Mode::kSelectiveOp;
    } else {
      int64_t n = -1;
      const char* begin = ac.selective_ac_option.data();
      const char* end = begin + ac.selective_ac_option.size();
      auto [ptr, ec] = std::from_chars(begin, end, n);
      if (ec != std::errc() || ptr != end || n < 0) {
        throw InputError("config error: activation_checkpoint.selective_ac_option = \"" +
                         ac.selective_ac_option + "\": expected \"op\" or a non-negative integer");
      }
      options.mode = AcOptions::Mode::kSelectiveLayer;
      options.layer_frequency = n;
    }
  } else if (ac.mode == "memory_budget") {
    options.mode = AcOptions::Mode::kMemoryBudget;
    options.memory_budget = ac.memory_budget;
  } else if (ac.mode == "auto") {
    options.mode = AcOptions::Mode::kAuto;
  } else {
    throw InputError("config error: activation_checkpoint.mode = \"" + ac.mode +
                     "\": expected none, full, selective, memory_budget or auto");
  }
  return options;
}

int64_t memory_limit_bytes(const JobConfig& config) {
  if (config.memory.limit.empty()) return 0;
  return static_cast<int64_t>(parse_memory_size(config.memory.limit));
}

int64_t available_memory(const JobConfig& config) {
  const int64_t limit = memory_limit_bytes(config);
  return limit > 0 ? limit : physical_memory_bytes();
}

PlannerOptions planner_options_from_config(const JobConfig& config) {
  PlannerOptions o;
  o.shard_degree = config.parallelism.data_parallel_shard_degree;
  o.bf16_compute = config.training.mixed_precision_param == "bfloat16";
  o.device_memory = memory_limit_bytes(config);
  return o;
}

int64_t data_parallel_ranks(const JobConfig& config) {
  const auto& p = config.parallelism;
  int64_t ranks = 0;
  if (__builtin_mul_overflow(p.data_parallel_replicate_degree, p.data_parallel_shard_degree,
                             &ranks))
    return INT64_MAX;
  return ranks;
}

int64_t gradient_accumulation_steps(const JobConfig& config, int64_t ranks) {
  const auto& t = config.training;
  if (t.global_batch_size == -1) return 1;
  int64_t per_pass = 0;
  // Past int64 it exceeds any global_batch_size (at most 2^24): no multiple.
  if (__builtin_mul_overflow(t.local_batch_size, ranks, &per_pass)) per_pass = INT64_MAX;
  if (t.global_batch_size % per_pass == 0) return t.global_batch_size / per_pass;
  throw InputError("training.global_batch_size = " + std::to_string(t.global_batch_size) +
                   ": expected -1 or a multiple of training.local_batch_size x data-parallel "
                   "ranks = " +
                   std::to_string(t.local_batch_size) + " x " + std::to_string(ranks) + " = " +
                   std::to_string(per_pass) + " (each step accumulates the gradients of " +
                   "global / " + std::to_string(per_pass) + " microbatches)");
}

}  // namespace remat
