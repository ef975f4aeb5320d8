// `remat plan --maximize throughput`: the batch size and the budget plan
// together. For each candidate local_batch_size (with
// training.global_batch_size set, each that splits it into whole
// microbatches) whose lowest reachable peak
// fits the device (memory.limit or physical RAM), the budget solver picks the
// least-recompute plan under the measured cost model, and a step's time is
// predicted from the calibrated op times (op_timing.h). With
// model.loss_chunk_rows = "auto", each batch is priced with the logits whole
// and with kSuggestedLossChunkRows-row chunks. Without a memory.limit the
// search ends early once tokens/s levels off (ThroughputSaturation).
#pragma once

#include <string>
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

struct ThroughputSearch {
  std::vector<ThroughputChoice> choices;  // best first
  // Why the search ended: the device is full, the candidates ran out, or
  // tokens/s stopped growing (ThroughputSaturation).
  std::string ended;
};

// The search's early stop without a memory.limit. Each batch costs a
// calibration (seconds to minutes at large batches), and on a CPU tokens/s
// levels off after a few doublings while the memory is then all of RAM:
// after kBatchesWithoutGain candidates in a row none of whose plans beats the
// best so far by more than kMinGain, larger batches are not tried. Within a
// memory.limit every batch that fits is priced.
class ThroughputSaturation {
 public:
  static constexpr int kBatchesWithoutGain = 2;
  static constexpr double kMinGain = 0.01;
  // The best tokens/s of one candidate batch; true when the search stops.
  bool saturated_after(double tokens_per_second);

 private:
  double best_ = 0;
  int without_gain_ = 0;
};

// InputError when not even batch 1 fits.
ThroughputSearch maximize_throughput(const JobConfig& config, const PlannerOptions& planner);

}  // namespace remat
