#include "cli/checkpoint_command.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "train/sharded_checkpoint.h"

namespace remat {

namespace {

constexpr const char* kCheckpointUsage =
    "usage: remat checkpoint convert SRC DST.safetensors\n"
    "       (SRC: a sharded checkpoint's step folder, e.g. outputs/checkpoint/step-10)\n";

}  // namespace

int run_checkpoint_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "convert")
    throw InputError(std::string("checkpoint: ") +
                     (args.empty() ? "missing subcommand" : "unknown subcommand " + args[0]) +
                     " (expected convert)\n" + kCheckpointUsage);
  if (args.size() != 3)
    throw InputError("checkpoint convert takes SRC and DST (2 arguments), got " +
                     std::to_string(args.size() - 1) + "\n" + kCheckpointUsage);
  const std::string& source = args[1];
  const std::string& target = args[2];
  if (!std::filesystem::is_directory(source))
    throw InputError("checkpoint convert: '" + source +
                     "' is not a folder (expected a sharded checkpoint's step folder, the one "
                     "holding index.json)\n" +
                     kCheckpointUsage);
  convert_sharded_checkpoint(source, target);
  std::printf("converted %s to %s\n", source.c_str(), target.c_str());
  return 0;
}

}  // namespace remat
