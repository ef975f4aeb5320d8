// Ctrl-C (SIGINT) and SIGTERM, what schedulers send, ask a training run to
// stop at the next step boundary; they never interrupt a step or a save.
//
// While a StopSignals object lives, both signals only record that a stop was
// asked for, so a second Ctrl-C during the final checkpoint save cannot lose
// it. The run then exits with 128 + the signal number (130 for SIGINT, 143
// for SIGTERM), the shell's convention, so an interrupted run is never
// mistaken for a finished one (README "Failure behaviour").
#pragma once

#include <csignal>

namespace remat {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones, or ignores both once one was received
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGINT or SIGTERM), or 0.
  int received() const;
  static const char* name(int signal);

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

}  // namespace remat
