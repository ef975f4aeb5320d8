// `remat train`: one training run, assembled torchtitan-style from separate
// pieces (setup: model and AC plan; session: state and executor; data;
// learning-rate schedule; optimizer; metrics; checkpoints). Bad input throws
// InputError before anything is allocated or any output file is touched.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "dist/comm.h"
#include "io/config.h"

namespace remat {

// Trains (or, with checkpoint.create_seed_checkpoint, writes the step-0
// checkpoint); returns the exit status: 0, 1 when a step's loss or gradient
// norm is not finite, 128 + the signal when stopped by SIGINT or SIGTERM.
// Under mpirun, every rank of `comm` calls it (train/data_parallel.h); the
// inputs are agreed (confirm_inputs) before the first step.
int run_train(const JobConfig& config, Communicator& comm);

// The latest complete checkpoint in the run's checkpoint.folder (under
// job.dump_folder): step-N.safetensors, or a sharded step folder step-N/
// holding its index, and the N of its name. A training run with
// checkpointing on and no checkpoint.load resumes from it, as torchtitan's
// does: the same command run again continues the run, rather than training
// afresh over its checkpoints.
struct FoundCheckpoint {
  std::string path;  // "" when there is none
  int64_t step = -1;
};
FoundCheckpoint latest_checkpoint(const JobConfig& config);

// The InputError of a failed read of config.checkpoint.load; where train
// found that file in its folder rather than being given it, the message
// says why it was read and how to start afresh.
InputError resume_error(const JobConfig& config, const InputError& e);

}  // namespace remat
