// A progress line for one-off work that can take more than about 2 s
// (loading or saving a large checkpoint, reading a large dataset, op-timing
// calibration): "loading step-9.safetensors: 45% (1.21GiB of 2.69GiB, 3 s)".
//
// Contract: it is drawn on stderr and only when stderr is a terminal, so
// piped or redirected output (logs, CI, tests) never holds it; it appears
// only once the work has run for the delay (2 s), is redrawn at most ten
// times a second in place (carriage return), and is erased when the work
// ends, so the lines printed after it are as they would be without it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace remat {

enum class ProgressUnit { kBytes, kItems };

// The line's text (no carriage return): `done` of `total` (0: unknown),
// `seconds` since the work began (whole seconds).
std::string format_progress(const std::string& what, int64_t done, int64_t total, ProgressUnit unit,
                            double seconds);

class Progress {
 public:
  Progress(std::string what, int64_t total, ProgressUnit unit);
  // The same on `out`, drawn only if `out` is a terminal, after `delay_seconds`.
  Progress(std::string what, int64_t total, ProgressUnit unit, FILE* out, double delay_seconds);
  ~Progress();  // erases the line if one was drawn
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` units of `total` are done. Costs a clock read when shown.
  void update(int64_t done);

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  int64_t total_;
  ProgressUnit unit_;
  FILE* out_;
  bool terminal_;
  double delay_seconds_;
  Clock::time_point start_ = Clock::now(), last_draw_{};
  bool drawn_ = false;
};

}  // namespace remat
