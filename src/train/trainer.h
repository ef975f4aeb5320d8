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

}  // namespace remat
