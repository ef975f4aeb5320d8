// A checkpoint that does not wait for the step boundary. Ctrl-C on mpirun
// reaches the ranks as Open MPI's SIGTERM, followed by SIGKILL
// odls_base_sigkill_timeout seconds later (1 by default): often before they
// reach the next boundary and save there. So at the signal a rank forks: the
// child, a copy-on-write image of the rank's memory at no copy cost, leaves
// the rank's session (Open MPI kills the rank's process group, not the
// child), writes this rank's shard of the state the image holds
// (sharded_checkpoint.h write_shard_and_index_if_complete) and exits, while
// the rank trains on towards the agreed boundary as before.
//
// Contract with the trainer: the training state (weights, moments, expert
// bias, step, data position) changes only while it holds hold(), and each
// change ends with committed(step); between two holds the state is the one
// after the last committed step, and that is what a child writes.
//
// Which steps: from the signal on, every state the rank commits is written,
// the current one at once and each later one when committed. The ranks are
// at most one step apart (each step ends with a collective every rank must
// reach), so a rank one step behind the others at the signal also writes
// their step when it completes it, and that step's checkpoint is complete as
// soon as the last rank's child is done. A step folder some rank never wrote
// (killed first) gets no index and is not loadable; the previous complete
// checkpoint stays the one to load.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace remat {

class StopSnapshot {
 public:
  // `write(step)` runs in the child: writes this rank's part of the
  // checkpoint of `step` (the state as the trainer left it), throwing on
  // failure (the child then exits 1, quietly: it has no stdout left to
  // write to). `start_step`: the state the run started from (a loaded
  // checkpoint, or the seed), which is never written again.
  StopSnapshot(std::function<void(int64_t step)> write, int64_t start_step);

  std::unique_lock<std::mutex> hold() { return std::unique_lock<std::mutex>(mutex_); }
  // Under hold(): the state is now the one after `step`.
  void committed(int64_t step);

  // From now on every committed state is written, the current one first
  // (unless it is the start). Only the first call does anything; any thread
  // may make it (the signal's watcher, or the trainer at the boundary).
  void start();

  // Waits for the child writing `step`: true if there is one and it wrote
  // its file.
  bool wait(int64_t step);

 private:
  void fork_child(int64_t step);  // under mutex_
  [[noreturn]] void run_child(int64_t step);

  const std::function<void(int64_t)> write_;
  const int64_t start_step_;
  std::mutex mutex_;
  int64_t committed_;
  bool started_ = false;
  std::map<int64_t, pid_t> children_;
};

}  // namespace remat
