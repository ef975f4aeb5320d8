// The commands that run a model without training it: the validation loss of
// a checkpoint, and the gradient dump the PyTorch oracle test compares
// against. Bad input throws InputError before any output file is touched.
#pragma once

#include <string>

#include "io/config.h"

namespace remat {

int run_eval(const JobConfig& config);
// One forward and backward pass on the first batch*(seq+1) tokens of
// `tokens_path` cut into rows of seq+1 (as the oracle does); prints the loss
// and writes every parameter's gradient to `out_path`.
int run_dump_gradients(const JobConfig& config, const std::string& tokens_path,
                       const std::string& out_path);

}  // namespace remat
