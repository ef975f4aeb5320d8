// Values that once crashed remat (SIGFPE, a stack overflow in libgomp) are
// config errors naming the key and the accepted range.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "io/config.h"

namespace remat {
namespace {

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    parse_job_config("", "test.toml", overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigLimits, HugeSeqLenAndBatchAreRangeErrors) {
  std::string e = error_of({"--training.seq_len=4611686018427387904"});
  EXPECT_NE(e.find("training.seq_len = 4611686018427387904"), std::string::npos) << e;
  EXPECT_NE(e.find("expected an integer <= 16777216"), std::string::npos) << e;
  e = error_of({"--training.local_batch_size=4611686018427387904"});
  EXPECT_NE(e.find("training.local_batch_size"), std::string::npos) << e;
  EXPECT_EQ(error_of({"--training.seq_len=16777216"}), "");
}

// Sizes become int64 byte counts: one beyond 2^62 bytes would overflow the
// cast (found by tests/fuzz/fuzz_cli with a 100-digit memory.limit).
// A size under one byte is none: "0.5B" as a memory.limit ran without a
// limit at all.
TEST(ConfigLimits, SizesAreAtLeastOneByte) {
  EXPECT_EQ(parse_memory_size("1B"), 1);
  EXPECT_EQ(parse_memory_size("0.5B"), 0);
  EXPECT_EQ(parse_memory_size("1e-300GiB"), 0);
  const std::string e = error_of({"--memory.limit", "0.5B"});
  EXPECT_NE(e.find("memory.limit = \"0.5B\""), std::string::npos) << e;
  EXPECT_NE(e.find("from 1B"), std::string::npos) << e;
}

TEST(ConfigLimits, SizesAreAtMostFourExbibytes) {
  EXPECT_EQ(parse_memory_size("4096PiB"), 0x1p62);  // the bound, in each unit that names it
  EXPECT_EQ(parse_memory_size("4EiB"), 0x1p62);
  EXPECT_EQ(parse_memory_size("4.001EiB"), 0);
  EXPECT_EQ(parse_memory_size("4096XiB"), 0);  // no such unit
  EXPECT_EQ(parse_memory_size("4194304TiB"), 0x1p62);
  EXPECT_EQ(parse_memory_size("4194305TiB"), 0);
  EXPECT_EQ(parse_memory_size("1e300GiB"), 0);
  std::string e = error_of({"--memory.limit", "1e30GiB"});
  EXPECT_NE(e.find("memory.limit = \"1e30GiB\""), std::string::npos) << e;
  EXPECT_NE(e.find("from 1B to 4EiB"), std::string::npos) << e;
  e = error_of({"--activation_checkpoint.memory_budget", "9e18B"});
  EXPECT_NE(e.find("activation_checkpoint.memory_budget = \"9e18B\""), std::string::npos) << e;
  EXPECT_EQ(error_of({"--memory.limit", "4194304TiB", "--activation_checkpoint.memory_budget",
                      "1000000TB"}),
            "");
}

TEST(ConfigLimits, ThreadsAreBoundedByTheMachine) {
  const int64_t max = max_training_threads();
  EXPECT_GE(max, 1);
  EXPECT_LE(max, 1024);
  EXPECT_EQ(max, std::min<int64_t>(1024, 4 * std::max(1u, std::thread::hardware_concurrency())));
  EXPECT_EQ(error_of({"--training.threads=" + std::to_string(max)}), "");
  for (const std::string& bad :
       {std::to_string(max + 1), std::string("100000"), std::string("9223372036854775807")}) {
    const std::string e = error_of({"--training.threads=" + bad});
    EXPECT_NE(e.find("training.threads = " + bad), std::string::npos) << e;
    EXPECT_NE(e.find("expected an integer in [0, " + std::to_string(max) + "]"), std::string::npos)
        << e;
  }
}

TEST(ConfigLimits, NegativeFfnMultiplierIsRefused) {
  const std::string e = error_of({"--model.ffn_dim_multiplier=-1.5"});
  EXPECT_NE(e.find("model.ffn_dim_multiplier = -1.5"), std::string::npos) << e;
}

TEST(ConfigLimits, DevicesAndFifosAreNotConfigs) {
  for (const std::string path : {"/dev/zero", "/dev/urandom"}) {
    try {
      load_job_config(path, {});
      FAIL() << path;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("character device"), std::string::npos) << e.what();
    }
  }
  const std::string fifo =
      (std::filesystem::temp_directory_path() / ("remat_config_fifo_" + std::to_string(::getpid())))
          .string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string message;
  try {
    load_job_config(fifo, {});  // must not block waiting for a writer
  } catch (const InputError& e) {
    message = e.what();
  }
  std::filesystem::remove(fifo);
  EXPECT_NE(message.find("FIFO"), std::string::npos) << message;
}

}  // namespace
}  // namespace remat
