// `remat generate --config FILE --checkpoint.load W.safetensors --prompt TEXT
//  [--max_new_tokens N] [--temperature T] [--top_k K] [--top_p P] [--seed S] [--ids]`:
// continues the prompt with the checkpoint's model through a KV cache
// (generate/decoder.h), streaming the text to stdout as it comes; what it
// loaded and how fast it went go to stderr, so stdout is only the text.
#pragma once

#include <cstdint>
#include <string>

#include "cli/arguments.h"
#include "generate/sampler.h"
#include "io/config.h"

namespace remat {

struct GenerateFlags {
  std::string prompt;
  int64_t max_new_tokens = 100;
  SamplingOptions sampling;
  bool ids = false;  // print "prompt: <ids>" and "generated: <ids>" instead of text
};

// The flags' values, checked before the config is read: InputError naming
// the flag, its value and what was expected, for an empty prompt, a
// temperature < 0, top_p outside (0, 1], a negative top_k or seed, or
// max_new_tokens < 1.
GenerateFlags parse_generate_flags(const CommandLine& c);

// Returns the exit status. InputError, before anything is printed to stdout,
// for a config without checkpoint.load, a checkpoint that does not fit the
// model, top_k above the vocabulary, or a run too long for the cache.
int run_generate(const JobConfig& config, const GenerateFlags& flags);

}  // namespace remat
