#include "train/session.h"

#include <algorithm>
#include <thread>

#include "ac/schedule.h"
#include "kernels/cpu/kernels.h"

namespace remat {

Session::Session(const Setup& setup, bool with_gradients)
    : state(setup.program(), allocator, with_gradients),
      executor(setup.program(),
               make_schedule(setup.program(), setup.ac.plan,
                             /*with_backward=*/setup.pass == Pass::kTraining),
               allocator, state) {}

int configure_threads(const JobConfig& config) {
  int threads = static_cast<int>(config.training.threads);
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu::set_num_threads(threads);
  return threads;
}

}  // namespace remat
