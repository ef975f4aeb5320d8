// The remat command line, parsed without running anything:
// `remat <command> --config FILE [--flag value ...] [--section.key value ...]`.
//
// Kept apart from the commands so the parser can be unit-tested and fuzzed on
// its own (tests/fuzz/fuzz_cli.cc). Every problem is an InputError.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace remat {

extern const char* const kUsage;

struct CommandLine {
  std::string command;  // "train", "eval", "plan", "grads", "generate" or "help"
  std::string config_path;
  // Command-specific flags with values: plan's "pareto", "maximize",
  // "timeline" and "timeline-compare",
  // grads' "tokens" and "out",
  // generate's "prompt", "max_new_tokens", "temperature", "top_k", "top_p", "seed".
  std::map<std::string, std::string> extra;
  // Everything else, in order, for the config loader ("--section.key", "value", ...).
  std::vector<std::string> overrides;
  // plan's flags without values.
  bool json = false, matmuls = false, torchtitan = false, explain = false;
  // generate's flag without a value: print token ids instead of text.
  bool ids = false;
};

// `args` is argv without argv[0]. InputError for a missing or unknown
// command, a missing --config, a flag without its value, grads without
// --tokens and --out, or generate without --prompt (its values are checked
// by the command, cli/generate_command.h). "help" (also -h, --help) needs nothing else.
CommandLine parse_command_line(const std::vector<std::string>& args);

// The config keys ("section.key") that `overrides` set, as --section.key
// value or --section.key=value.
std::set<std::string> override_keys(const std::vector<std::string>& overrides);

}  // namespace remat
