// checkpoint.async_mode (torchtitan's "async"; "async_with_pinned_mem" is
// the same here: the state is host memory already, nothing to stage or
// pin): an interval save is written by a child process forked at the step
// boundary, a copy-on-write image of the state after that step, while the
// run trains on. No copy is made up front; the kernel copies a page of the
// state only when the run changes it while the child still reads it, so a
// save in flight costs up to one copy of the weights and AdamW moments, in
// the child (outside the allocator's books, which the planner predicts).
//
// One save in flight at a time: the next interval save, the run's last save
// (written by the run itself) and the end of the run wait for it. A save
// that failed stops the run at the next step boundary with its error.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>

namespace remat {

class BackgroundSave {
 public:
  BackgroundSave() = default;
  ~BackgroundSave();  // waits for a save in flight, quietly
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Waits for the save in flight (OutputError if it failed), then forks a
  // child that runs write() for `step` and exits: 0 when write() returned,
  // 1 (its error printed on stderr) when it threw.
  void start(int64_t step, const std::function<void()>& write);
  // Waits for the save in flight, if any: OutputError if it failed.
  void wait();
  // Without waiting: OutputError if the save in flight has already failed.
  void poll();

 private:
  void reap(bool block);
  [[noreturn]] static void run_child(int64_t step, const std::function<void()>& write);

  pid_t child_ = -1;
  int64_t step_ = 0;
};

}  // namespace remat
