#include "core/progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace remat {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(ProgressFormat, ShowsShareAmountsAndSeconds) {
  EXPECT_EQ(format_progress("loading step-9.safetensors", 512 * kMiB, 2048 * kMiB,
                            ProgressUnit::kBytes, 3.7),
            "loading step-9.safetensors: 25% (512.00MiB of 2.00GiB, 3 s)");
  EXPECT_EQ(format_progress("calibrating op times", 3, 4, ProgressUnit::kItems, 12.0),
            "calibrating op times: 75% (3 of 4, 12 s)");
  EXPECT_EQ(format_progress("reading data", 1500 * kMiB, 0, ProgressUnit::kBytes, 2.0),
            "reading data: 1.46GiB (2 s)");
  EXPECT_EQ(format_progress("x", 12345, 1000, ProgressUnit::kItems, 0),
            "x: 100% (12,345 of 1,000, 0 s)");
}

// Redirected or piped: nothing at all, even with no delay.
TEST(Progress, WritesNothingWhenNotATerminal) {
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  {
    Progress progress("loading", 100, ProgressUnit::kBytes, file, /*delay_seconds=*/0);
    for (int64_t done = 0; done <= 100; done += 10) progress.update(done);
  }
  EXPECT_EQ(std::ftell(file), 0);
  std::fclose(file);
}

// On a terminal (a pseudo-terminal here) the line is drawn in place once
// the delay has passed and erased at the end; within the delay, nothing.
TEST(Progress, DrawsAndErasesOnATerminal) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0)
    GTEST_SKIP() << "no pseudo-terminal on this machine";
  FILE* terminal = std::fopen(ptsname(master), "w");
  ASSERT_NE(terminal, nullptr);
  {
    Progress quiet("quick", 10, ProgressUnit::kItems, terminal, /*delay_seconds=*/60);
    quiet.update(5);
    Progress shown("saving", 10, ProgressUnit::kItems, terminal, /*delay_seconds=*/0);
    shown.update(4);
  }
  std::fclose(terminal);
  // The terminal hands its output over in pieces; with its only writer
  // closed, read() gives everything and then fails (EIO).
  std::string seen;
  char buffer[256];
  for (ssize_t n; (n = read(master, buffer, sizeof buffer)) > 0;)
    seen.append(buffer, static_cast<size_t>(n));
  close(master);
  EXPECT_EQ(seen.find("quick"), std::string::npos) << seen;
  EXPECT_EQ(seen.rfind("\rsaving: 40% (4 of 10, 0 s)\033[K", 0), 0u) << seen;
  EXPECT_TRUE(seen.ends_with("\r\033[K")) << seen;
}

}  // namespace
}  // namespace remat
