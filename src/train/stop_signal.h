// Ctrl-C (SIGINT) and SIGTERM, what schedulers send, ask a training run to
// stop at the next step boundary; they never interrupt a step or a save.
//
// While a StopSignals object lives, both signals only record that a stop was
// asked for, so a second Ctrl-C during the final checkpoint save cannot lose
// it. The run then exits with 128 + the signal number (130 for SIGINT, 143
// for SIGTERM), the shell's convention, so an interrupted run is never
// mistaken for a finished one (README "Failure behaviour").
//
// Work that cannot wait for the step boundary (a snapshot of the training
// state, train/stop_snapshot.h) goes in `on_first`: it runs on a thread of
// its own, never in the signal handler, so it may allocate, lock and fork.
#pragma once

#include <csignal>
#include <functional>
#include <thread>

namespace remat {

class StopSignals {
 public:
  // Installs the handlers; with `on_first`, starts the thread that calls it
  // once, with the first signal received.
  explicit StopSignals(std::function<void(int signal)> on_first = {});
  // Waits for `on_first` if it runs; restores the previous handlers, or
  // ignores both signals once one was received.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGINT or SIGTERM), or 0.
  int received() const;
  static const char* name(int signal);

 private:
  void watch();

  std::function<void(int)> on_first_;
  int wake_read_ = -1;  // the handler writes a byte to the pipe's other end
  std::thread watcher_;
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

}  // namespace remat
