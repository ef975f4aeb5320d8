// `remat plan --maximize throughput`: the batch size and the budget plan
// together. For each candidate local_batch_size (with
// training.global_batch_size set, each that splits it into whole
// microbatches) whose lowest reachable peak
// fits the device (memory.limit or physical RAM), the budget solver picks the
// least-recompute plan under the measured cost model, and a step's time is
// predicted from the calibrated op times (op_timing.h). With
// model.loss_chunk_rows = "auto", each batch is priced with the logits whole
// and with kSuggestedLossChunkRows-row chunks.
#pragma once

#include <vector>

#include "ac/plan.h"
#include "io/config.h"
#include "planner/planner.h"

namespace remat {

struct ThroughputChoice {
  int64_t batch = 0;
  // Per optimizer step with training.global_batch_size set (the candidate
  // batches are then its divisors), else 1. The figures are one
  // microbatch's; tokens/s is the step's too.
  int64_t microbatches = 1;
  // The loss head (model.loss_chunk_rows; 0: the logits whole). With "auto"
  // both heads are candidates, each its own choice.
  int64_t loss_chunk_rows = 0;
  int64_t peak_bytes = 0;        // predicted
  double recompute_seconds = 0;  // measured cost model
  double step_seconds = 0;       // predicted
  double tokens_per_second = 0;  // predicted
  std::string plan;              // description
};

// Best first. InputError when not even batch 1 fits.
std::vector<ThroughputChoice> maximize_throughput(const JobConfig& config,
                                                  const PlannerOptions& planner);

}  // namespace remat
