// The commands that run a model without training it: the validation loss of
// a checkpoint, and the gradient dump the PyTorch oracle test compares
// against. Bad input throws InputError before any output file is touched.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "io/config.h"
#include "runtime/executor.h"

namespace remat {

// The mean loss of a forward-only executor (batch 1) over the first `rows`
// eval rows of `tokens` (io/dataset.h), one row per pass: what `remat eval`
// prints and what validation while training logs, so the two agree bit for bit.
double mean_eval_loss(Executor& executor, std::span<const int32_t> tokens, int64_t seq_len,
                      int64_t rows);

int run_eval(const JobConfig& config);

// Says on stderr that `what` (e.g. "validation loss is not finite (nan)")
// because the weights of `checkpoint` give NaN or infinite logits, then
// `consequence` if any; returns exit status 1. Not bad input (the weights
// load: finite, if huge), and no fault of remat's: eval, grads and generate
// end so.
int non_finite_logits(const std::string& what, const std::string& checkpoint,
                      const std::string& consequence = "");
// One forward and backward pass on the first batch*(seq+1) tokens of
// `tokens_path` cut into rows of seq+1 (as the oracle does); prints the loss
// and writes every parameter's gradient to `out_path`.
int run_dump_gradients(const JobConfig& config, const std::string& tokens_path,
                       const std::string& out_path);

}  // namespace remat
