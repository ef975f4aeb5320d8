#include "train/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace remat {
namespace {

StepMetrics example() {
  StepMetrics m;
  m.step = 12;
  m.loss = 7.1234;
  m.grad_norm = 1.2345;
  m.peak_bytes = 212 * 1024 * 1024;  // under a GiB: still printed in GiB
  m.device_bytes = int64_t{24} * 1024 * 1024 * 1024;
  m.tokens_per_second = 1234;
  m.model_flops_per_second = 0.5e12;
  m.hardware_flops_per_second = 0.6e12;
  m.peak_flops = 1e12;
  return m;
}

// torchtitan's line: memory always in GiB, "%5.2f" wide.
TEST(Metrics, LogLineGivesMemoryInGiBAsTorchtitan) {
  EXPECT_EQ(format_log_line(example()),
            "step: 12  loss:  7.1234  grad_norm:  1.2345  memory:  0.21GiB(0.86%)  tps: 1,234  "
            "tflops: 0.50  mfu: 50.00%  hfu: 60.00%");
  StepMetrics big = example();
  big.peak_bytes = int64_t{3} * 1024 * 1024 * 1024 + int64_t{215} * 1024 * 1024;
  EXPECT_NE(format_log_line(big).find("memory:  3.21GiB(13.37%)"), std::string::npos);
}

TEST(Metrics, ColourIsTorchtitansAndOnlyOnRequest) {
  const std::string plain = format_log_line(example());
  EXPECT_EQ(plain.find('\033'), std::string::npos);
  const std::string colored = format_log_line(example(), /*color=*/true);
  EXPECT_EQ(colored.rfind("\033[31mstep: 12  \033[32mloss:", 0), 0u) << colored;
  EXPECT_NE(colored.find("\033[38;2;54;234;195mmemory:  0.21GiB"), std::string::npos);
  EXPECT_EQ(colored.substr(colored.size() - 5), "\033[39m");  // the terminal's colour back
}

}  // namespace
}  // namespace remat
