#include "train/background_save.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "train/stop_signal.h"

namespace remat {

BackgroundSave::~BackgroundSave() {
  try {
    wait();
  } catch (...) {  // the run is ending on another error already; the child printed its own
  }
}

void BackgroundSave::start(int64_t step, const std::function<void()>& write) {
  wait();
  // Whatever stdio holds unwritten would be written twice, once by each process.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) run_child(step, write);
  if (pid < 0) {
    // No child: the run writes the save itself, as with async_mode "disabled".
    std::fprintf(stderr,
                 "warning: checkpoint.async_mode: cannot fork the save of step %lld (%s); "
                 "writing it before training on\n",
                 static_cast<long long>(step), std::strerror(errno));
    write();
    return;
  }
  child_ = pid;
  step_ = step;
}

void BackgroundSave::wait() { reap(/*block=*/true); }

void BackgroundSave::poll() { reap(/*block=*/false); }

void BackgroundSave::reap(bool block) {
  if (child_ < 0) return;
  int status = 0;
  pid_t done = 0;
  do {
    done = ::waitpid(child_, &status, block ? 0 : WNOHANG);
  } while (done < 0 && errno == EINTR);
  if (done == 0) return;  // still writing
  const pid_t child = child_;
  child_ = -1;
  if (done == child && WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  std::string how;
  if (done != child)
    how = std::string("waiting for it failed (") + std::strerror(errno) + ")";
  else if (WIFSIGNALED(status))
    how = "it was killed by signal " + std::to_string(WTERMSIG(status));
  else
    how = "it exited with status " + std::to_string(WEXITSTATUS(status)) +
          " (its error is printed above)";
  throw OutputError("the checkpoint save of step " + std::to_string(step_) +
                    ", written in the background (checkpoint.async_mode), failed: " + how +
                    "; training stopped. The previous complete checkpoint is what a resume "
                    "loads");
}

// glibc's fork() takes malloc's locks around the fork, so the child, which
// has only this thread, can allocate; the save touches nothing another
// thread may have held (OpenMP, oneDNN): it reads the state's host memory and
// writes files.
[[noreturn]] void BackgroundSave::run_child(int64_t step, const std::function<void()>& write) {
  // Out of the terminal's process group: Ctrl-C stops the run at its next
  // step boundary, which waits for this save, rather than cutting it short.
  ::setsid();
  default_stop_signals_in_child();
  int status = 1;
  try {
    write();
    status = 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: the checkpoint save of step %lld (checkpoint.async_mode): %s\n",
                 static_cast<long long>(step), e.what());
  } catch (...) {
    std::fprintf(stderr, "error: the checkpoint save of step %lld (checkpoint.async_mode) failed\n",
                 static_cast<long long>(step));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(status);  // no atexit work: that is the run's
}

}  // namespace remat
