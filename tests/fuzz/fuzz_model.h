// What the commands do with a config that parsed, short of building the
// program: resolve the model's arguments and check their sizes. An absurd
// size must be an InputError here, never an overflow, a division by zero or
// a crash (issue 9 findings 2-4 and 8 were all found on this path).
#pragma once

#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "io/config.h"
#include "models/limits.h"
#include "models/llama3.h"
#include "models/llama4.h"

namespace remat::fuzz {

inline void check_valid_config(const JobConfig& config) {
  const auto& t = config.training;
  require(t.local_batch_size > 0 && t.seq_len > 0 && t.steps >= 0, "training sizes validated");
  require(t.threads >= 0 && t.threads <= max_training_threads(), "training.threads validated");
  // Sizes the planner and the trainer turn into int64 byte counts.
  constexpr double kMaxBytes = 9.2e18;
  if (!config.memory.limit.empty()) {
    const double limit = parse_memory_size(config.memory.limit);
    require(limit > 0 && limit < kMaxBytes, "memory.limit is a size that fits an int64");
  }
  const std::string& budget = config.activation_checkpoint.memory_budget;
  if (!budget.empty() && parse_memory_size(budget) > 0)
    require(parse_memory_size(budget) < kMaxBytes, "a memory_budget size fits an int64");
  if (config.model.name == "llama4") {
    const Llama4Args args = resolve_llama4_args(config.model);
    check_model_limits(args.base, &args, t.local_batch_size, t.seq_len);
  } else {
    const TransformerArgs args = resolve_llama3_args(config.model);
    check_model_limits(args, nullptr, t.local_batch_size, t.seq_len);
  }
}

}  // namespace remat::fuzz
