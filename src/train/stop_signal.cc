#include "train/stop_signal.h"

#include <unistd.h>

#include <atomic>

namespace remat {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_count{0};

// Async-signal-safe: atomics and write(2) only.
void on_stop_signal(int signal) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal);
  if (g_count.fetch_add(1) == 1) {
    static const char kMessage[] =
        "\nremat: stop already requested; finishing the step and the checkpoint save\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  }
}

}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  g_count = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in progress carry on
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

StopSignals::~StopSignals() {
  if (received() != 0) {
    // The run stopped on a signal and is on its way out with 128 + N: more of
    // them (a Ctrl-C storm) must not kill it before it exits, which would
    // lose the buffered log and turn exit status 130 into death by SIGINT.
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    return;
  }
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

int StopSignals::received() const { return g_signal.load(); }

const char* StopSignals::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace remat
