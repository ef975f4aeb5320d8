#include "train/session.h"

#include <algorithm>
#include <thread>

#include "ac/schedule.h"
#include "dist/comm.h"
#include "kernels/cpu/kernels.h"

namespace remat {

Session::Session(const Setup& setup, bool with_gradients, int shard_ranks, int rank)
    : state(setup.program(), allocator, with_gradients, cpu_backend(),
            shard_ranks > 1 ? Holds::kBuffersOnly : Holds::kEverything),
      executor(setup.program(),
               make_schedule(setup.program(), setup.ac.plan,
                             /*with_backward=*/setup.pass == Pass::kTraining),
               allocator, state) {
  if (shard_ranks <= 1) return;
  sharded = std::make_unique<ShardedState>(state, executor.schedule(), shard_ranks, rank);
  executor.set_param_source(sharded.get());
}

int configure_threads(const JobConfig& config) {
  int threads = static_cast<int>(config.training.threads);
  // 0: the cores, shared by the ranks of an MPI job on this machine.
  if (threads == 0)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks());
  cpu::set_num_threads(threads);
  return threads;
}

}  // namespace remat
