// `remat checkpoint convert SRC DST.safetensors`: a sharded checkpoint (the
// step folder N ranks wrote, train/sharded_checkpoint.h) as the single-file
// checkpoint one process saves, for tools that read one file (the PyTorch
// oracle, `eval`, `generate`, PyTorch's safetensors loader). Needs no config:
// the index names every tensor and its shape.
#pragma once

#include <string>
#include <vector>

namespace remat {

// `args` follows "checkpoint". Returns the exit status; InputError (exit 2)
// for a missing or unknown subcommand, a bad checkpoint or an unwritable
// output (nothing written).
int run_checkpoint_command(const std::vector<std::string>& args);

}  // namespace remat
