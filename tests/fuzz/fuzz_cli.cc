// Fuzzes the command line: the input is argv after the program name, one
// argument per NUL-separated piece. parse_command_line splits it into the
// command, --config, the command's flags and config overrides; the overrides
// are then applied to a debug config exactly as `remat train --config ...`
// does (parse_job_config), and the model's sizes are checked
// (fuzz_model.h). Nothing is run, read or written.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/arguments.h"
#include "fuzz_common.h"
#include "fuzz_model.h"
#include "io/config.h"

namespace {

// configs/llama3_debug.toml without its comments.
const char* const kBaseConfig = R"(
[job]
description = "Llama 3 debug training"
dump_folder = "./outputs"
[model]
name = "llama3"
flavor = "debugmodel"
tokenizer = "byte"
[training]
local_batch_size = 8
seq_len = 256
steps = 100
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
per_op_sac_force_recompute_mm_by_fqns = []
[metrics]
log_freq = 10
)";

constexpr size_t kMaxArguments = 256;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string current;
  for (size_t i = 0; i < size && args.size() < kMaxArguments; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  if (!current.empty() && args.size() < kMaxArguments) args.push_back(current);

  remat::fuzz::expect_input_errors_only([&] {
    const remat::CommandLine c = remat::parse_command_line(args);
    if (c.command == "help") return;
    remat::fuzz::require(!c.config_path.empty(), "a parsed command line has a config path");
    remat::fuzz::require(c.command != "grads" || (c.extra.count("tokens") && c.extra.count("out")),
                         "grads has --tokens and --out");
    const remat::JobConfig config =
        remat::parse_job_config(kBaseConfig, "llama3_debug.toml", c.overrides);
    remat::fuzz::check_valid_config(config);
  });
  return 0;
}
