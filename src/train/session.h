// What train, eval and grads run a setup (planner/setup.h) with: the model's
// state in memory, accounted by one allocator, and an executor over the
// setup's plan (forward and backward for Pass::kTraining, forward only for
// Pass::kForwardOnly). Building one allocates the parameters (and gradients)
// but runs nothing. The setup must outlive the session.
#pragma once

#include "io/config.h"
#include "planner/setup.h"
#include "runtime/executor.h"
#include "runtime/model_state.h"

namespace remat {

struct Session {
  Session(const Setup& setup, bool with_gradients);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Allocator allocator;
  ModelState state;
  Executor executor;
};

// Sets the kernels' thread count from training.threads (0: one per core,
// shared by the ranks of an MPI job on this machine);
// returns it.
int configure_threads(const JobConfig& config);

}  // namespace remat
