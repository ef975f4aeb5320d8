// Ctrl-C (SIGINT) and SIGTERM, what schedulers send, ask a training run to
// stop at the next step boundary, or before a step's next microbatch (the
// trainer then drops that step); they never interrupt a pass or a save.
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
//
// Neither signal is ever handled on a thread that runs kernels
// (route_stop_signals_to_own_thread below).
#pragma once

#include <csignal>
#include <functional>
#include <thread>

namespace remat {

// Keeps SIGINT and SIGTERM off every thread main() starts, kernels' threads
// included, and gives them one thread of their own to be handled on (by
// StopSignals' handlers, or by their default action, which ends the process
// as before). Call it first in main(), before any thread starts: threads
// inherit the block. Why: oneDNN's JIT f32 GEMM kernels point the stack
// pointer at a heap buffer while they run (oneDNN issue 4845, fixed upstream
// after the 2.x that Debian ships), so a signal handled on such a thread
// writes its frame over the heap; under mpirun, Ctrl-C's SIGTERM did that
// in about half the runs ("corrupted size vs. prev_size" a step later).
// Threads started before main() (OpenBLAS's pool, by its library's
// constructor) keep both signals: their kernels are compiled code with a
// real stack, where a handler is harmless.
void route_stop_signals_to_own_thread();

// In a child forked by a thread that keeps them blocked (a checkpoint
// snapshot, a save in the background): SIGINT and SIGTERM back to their
// default action and unblocked, so the child stops on them like any process.
void default_stop_signals_in_child();

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
