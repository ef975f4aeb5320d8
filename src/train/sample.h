// The short sample `remat train` prints every metrics.sample_freq steps, as
// llm.c does, to show what the model has learnt so far.
#pragma once

#include <string>

#include "core/memory.h"
#include "io/config.h"
#include "io/tokenizer.h"
#include "runtime/model_state.h"

namespace remat {

// 32 tokens after the prompt "The" (after BOS), sampled at temperature 1
// with training.seed, so a run's samples depend only on its weights. The
// decoding books its memory on `allocator` (the run's: it counts towards
// the run's peak) and leaves nothing allocated; the state is not changed.
// Returns the text as one line: newlines, tabs, quotes, backslashes and
// other control bytes are escaped as in C, the whole in double quotes.
std::string training_sample(const JobConfig& config, const ModelState& state, Allocator& allocator,
                            const Tokenizer& tokenizer);

}  // namespace remat
