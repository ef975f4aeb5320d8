#include "train/background_save.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/error.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("remat_background_" + std::to_string(::getpid()) + name);
}

// The write runs in another process: what it changes in memory stays
// there, what it writes to a file is seen once wait() returns.
TEST(BackgroundSave, WritesInAChildProcessAndWaitSeesItsFile) {
  const fs::path file = scratch("_a");
  int in_memory = 0;
  BackgroundSave save;
  save.start(7, [&] {
    in_memory = 1;
    std::ofstream(file) << ::getpid();
  });
  save.wait();
  std::ifstream in(file);
  pid_t writer = 0;
  in >> writer;
  EXPECT_NE(writer, 0);
  EXPECT_NE(writer, ::getpid());
  EXPECT_EQ(in_memory, 0);
  fs::remove(file);
}

TEST(BackgroundSave, AFailedWriteIsReportedWithItsStep) {
  BackgroundSave save;
  save.start(12, [] { throw std::runtime_error("disk full"); });
  try {
    save.wait();
    FAIL() << "a failed save went unreported";
  } catch (const OutputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("step 12"), std::string::npos) << message;
    EXPECT_NE(message.find("checkpoint.async_mode"), std::string::npos) << message;
    EXPECT_NE(message.find("status 1"), std::string::npos) << message;
  }
  save.wait();  // reported once: nothing in flight any more
}

// poll() does not wait for a save still writing; the next start() does, so
// that two saves never write at once.
TEST(BackgroundSave, PollDoesNotWaitAndTheNextSaveWaitsForThePrevious) {
  const fs::path first = scratch("_first"), second = scratch("_second");
  BackgroundSave save;
  save.start(1, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream(first) << "done";
  });
  save.poll();
  EXPECT_FALSE(fs::exists(first));  // poll() returned while the child slept
  save.start(2, [&] {
    if (!fs::exists(first)) throw std::runtime_error("the first save was still writing");
    std::ofstream(second) << "done";
  });
  save.wait();
  EXPECT_TRUE(fs::exists(second));
  fs::remove(first);
  fs::remove(second);
}

}  // namespace
}  // namespace remat
