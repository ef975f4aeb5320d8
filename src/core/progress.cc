#include "core/progress.h"

#include <unistd.h>

#include <utility>

#include "core/format.h"

namespace remat {

namespace {

// How often a shown line is redrawn: often enough to look alive, rarely
// enough that the terminal costs nothing next to the work.
constexpr double kRedrawSeconds = 0.1;

std::string amount(int64_t value, ProgressUnit unit) {
  return unit == ProgressUnit::kBytes ? format_bytes(value) : with_thousands(value);
}

}  // namespace

std::string format_progress(const std::string& what, int64_t done, int64_t total, ProgressUnit unit,
                            double seconds) {
  const std::string elapsed = std::to_string(static_cast<int64_t>(seconds)) + " s";
  if (total <= 0) return what + ": " + amount(done, unit) + " (" + elapsed + ")";
  const int64_t percent = done >= total ? 100 : done * 100 / total;
  return what + ": " + std::to_string(percent) + "% (" + amount(done, unit) + " of " +
         amount(total, unit) + ", " + elapsed + ")";
}

Progress::Progress(std::string what, int64_t total, ProgressUnit unit)
    : Progress(std::move(what), total, unit, stderr, 2.0) {}

Progress::Progress(std::string what, int64_t total, ProgressUnit unit, FILE* out,
                   double delay_seconds)
    : what_(std::move(what)),
      total_(total),
      unit_(unit),
      out_(out),
      terminal_(isatty(fileno(out)) != 0),
      delay_seconds_(delay_seconds) {}

Progress::~Progress() {
  if (!drawn_) return;
  std::fputs("\r\033[K", out_);  // back to the line's start, erased
  std::fflush(out_);
}

void Progress::update(int64_t done) {
  if (!terminal_) return;
  const Clock::time_point now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (seconds < delay_seconds_) return;
  if (drawn_ && std::chrono::duration<double>(now - last_draw_).count() < kRedrawSeconds) return;
  last_draw_ = now;
  drawn_ = true;
  std::fprintf(out_, "\r%s\033[K", format_progress(what_, done, total_, unit_, seconds).c_str());
  std::fflush(out_);
}

}  // namespace remat
