#include "train/stop_signal.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <utility>

namespace remat {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_count{0};
std::atomic<int> g_wake{-1};  // the watcher's pipe (its write end), or -1

// Async-signal-safe: atomics and write(2) only.
void on_stop_signal(int signal) {
  const int saved_errno = errno;
  int expected = 0;
  g_signal.compare_exchange_strong(expected, signal);
  if (g_count.fetch_add(1) == 1) {
    static const char kMessage[] =
        "\nremat: stop already requested; finishing the step and the checkpoint save\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  }
  const int wake = g_wake.load();
  if (wake >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(wake, &byte, 1);  // non-blocking: never stalls here
  }
  errno = saved_errno;
}

sigset_t stop_signal_set() {
  sigset_t both;
  sigemptyset(&both);
  sigaddset(&both, SIGINT);
  sigaddset(&both, SIGTERM);
  return both;
}

}  // namespace

void route_stop_signals_to_own_thread() {
  const sigset_t both = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &both, nullptr);
  // Detached: it only waits, and ends with the process.
  std::thread([both] {
    pthread_sigmask(SIG_UNBLOCK, &both, nullptr);
    for (;;) ::pause();  // returns after each handler; the default action ends the process
  }).detach();
}

void default_stop_signals_in_child() {
  const sigset_t both = stop_signal_set();
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::sigprocmask(SIG_UNBLOCK, &both, nullptr);
}

StopSignals::StopSignals(std::function<void(int)> on_first) : on_first_(std::move(on_first)) {
  g_signal = 0;
  g_count = 0;
  int fds[2];
  // Without a pipe there is no watcher: the run still stops at the boundary.
  if (on_first_ && ::pipe2(fds, O_CLOEXEC) == 0) {
    ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
    wake_read_ = fds[0];
    g_wake = fds[1];
    watcher_ = std::thread([this] { watch(); });
  }
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in progress carry on
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

// Waits for the handler's bytes; the pipe's end (EOF) ends it.
void StopSignals::watch() {
  const sigset_t both = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &both, nullptr);  // never here: on_first may be running
  bool called = false;
  for (;;) {
    char byte = 0;
    const ssize_t n = ::read(wake_read_, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    if (!called) on_first_(received());
    called = true;
  }
}

StopSignals::~StopSignals() {
  if (received() != 0) {
    // The run stopped on a signal and is on its way out with 128 + N: more of
    // them (a Ctrl-C storm) must not kill it before it exits, which would
    // lose the buffered log and turn exit status 130 into death by SIGINT.
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
  } else {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  if (watcher_.joinable()) {
    ::close(g_wake.exchange(-1));
    watcher_.join();
    ::close(wake_read_);
  }
}

int StopSignals::received() const { return g_signal.load(); }

const char* StopSignals::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace remat
