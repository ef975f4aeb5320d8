#include "train/stop_snapshot.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <utility>

#include "train/stop_signal.h"

namespace remat {

StopSnapshot::StopSnapshot(std::function<void(int64_t)> write, int64_t start_step)
    : write_(std::move(write)), start_step_(start_step), committed_(start_step) {}

void StopSnapshot::committed(int64_t step) {
  committed_ = step;
  if (started_) fork_child(step);
}

void StopSnapshot::start() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (started_) return;
  started_ = true;
  fork_child(committed_);
}

// glibc's fork() takes malloc's locks around the fork, so the child, which
// has only this thread, can allocate; it touches nothing another thread may
// have held (MPI, OpenMP, stdio), and its memory stays the image of the
// moment of the fork however the rank changes its own afterwards.
void StopSnapshot::fork_child(int64_t step) {
  if (step <= start_step_ || children_.count(step) > 0) return;
  const pid_t pid = ::fork();
  if (pid == 0) run_child(step);
  if (pid > 0) {
    children_[step] = pid;
    return;
  }
  std::fprintf(stderr,
               "warning: cannot fork the checkpoint snapshot of step %lld (%s); only the save at "
               "the step boundary remains\n",
               static_cast<long long>(step), std::strerror(errno));
}

[[noreturn]] void StopSnapshot::run_child(int64_t step) {
  ::setsid();  // out of the rank's process group, which Open MPI kills
  // The signal's watcher forks with both signals blocked, and the handlers
  // only record them: the child can be stopped like any other process.
  default_stop_signals_in_child();
  // Nothing of the rank's stays open here: its stdout and stderr lead to
  // mpirun, which is on its way out, and its connections (MPI) must close
  // when the rank dies, for the other ranks to see it.
  const int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
  }
  ::close_range(3, ~0U, 0);
  int status = 1;
  try {
    write_(step);
    status = 0;
  } catch (...) {  // the temporary is removed; the step folder gets no index from this child
  }
  ::_exit(status);  // no atexit work: it is the rank's (MPI's finalization, its log)
}

bool StopSnapshot::wait(int64_t step) {
  pid_t pid = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = children_.find(step);
    if (it == children_.end()) return false;
    pid = it->second;
    children_.erase(it);
  }
  int status = 0;
  pid_t done = 0;
  do {
    done = ::waitpid(pid, &status, 0);
  } while (done < 0 && errno == EINTR);
  return done == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace remat
