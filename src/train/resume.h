// A resumed run: how it continues the run that saved its checkpoint
// (README "Resuming a run").
#pragma once

#include <cstdint>

#include "io/config.h"
#include "train/checkpoint.h"

namespace remat {

// Where a resumed run's data continues, and what it warns about when the run
// differs from the one that saved (README "Resuming a run"): the learning-rate
// schedule is laid over this run's training.steps; the data continues at the
// window the saving run would have read next when seq_len and the dataset are
// the same, whatever the batch size; else (or for a checkpoint without that
// record) at (step x batch) mod windows.
int64_t resume_data_position(const JobConfig& config, const RunRecord& saved, int64_t start_step,
                             int64_t windows, int ranks);

}  // namespace remat
