// What train, eval and grads run a setup (planner/setup.h) with: the model's
// state in memory, accounted by one allocator, and an executor over the
// setup's plan (forward and backward for Pass::kTraining, forward only for
// Pass::kForwardOnly). Building one allocates the parameters (and gradients)
// but runs nothing. The setup must outlive the session.
#pragma once

#include <memory>

#include "io/config.h"
#include "planner/setup.h"
#include "runtime/executor.h"
#include "runtime/model_state.h"
#include "runtime/sharded_state.h"

namespace remat {

struct Session {
  // shard_ranks > 1: the parameters, gradients and moments are sharded over
  // that many ranks (runtime/sharded_state.h), this process being `rank`;
  // the state then holds the buffers only.
  Session(const Setup& setup, bool with_gradients, int shard_ranks = 1, int rank = 0);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Allocator allocator;
  ModelState state;
  Executor executor;
  std::unique_ptr<ShardedState> sharded;  // null unless sharded
};

// Sets the kernels' thread count from training.threads (0: one per core,
// shared by the ranks of an MPI job on this machine);
// returns it.
int configure_threads(const JobConfig& config);

}  // namespace remat
