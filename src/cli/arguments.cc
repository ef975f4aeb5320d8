#include "cli/arguments.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace remat {

const char* const kUsage =
    "usage: remat <command> --config FILE [--section.key value ...]\n"
    "commands:\n"
    "  train   train the model the config describes\n"
    "  eval    print the validation loss of --checkpoint.load on --validation.dataset\n"
    "  plan    predict peak memory and recompute per AC mode without running;\n"
    "          --json for tools, --mm for the matmul table, --torchtitan for bf16 x 8 ranks,\n"
    "          --pareto FILE.svg|.csv|.json for the memory_budget front,\n"
    "          --explain for each value the plan keeps or rebuilds,\n"
    "          --timeline FILE.svg|.json for the bytes held over one step (with\n"
    "          --timeline-compare MODE, e.g. none, a second mode on the same axes),\n"
    "          --maximize throughput for the batch size and plan with the most tokens/s\n"
    "  grads   one forward/backward pass; --tokens FILE.npy --out FILE.safetensors\n"
    "          (the gradient dump the PyTorch oracle test compares)\n"
    "  generate continue --prompt TEXT with the weights of --checkpoint.load FILE, streaming;\n"
    "          --max_new_tokens N (100), --temperature T (1; 0: greedy), --top_k K (0: all),\n"
    "          --top_p P (1), --seed S (0); --ids prints token ids instead of text\n"
    "  tokenizer train --input FILE --vocab_size N --output FILE.model\n"
    "          [--model_type bpe|unigram]: a SentencePiece tokenizer for model.tokenizer_path\n"
    "          (needs no --config)\n"
    "  checkpoint convert SRC DST.safetensors: a sharded checkpoint's step folder as one\n"
    "          single-file checkpoint (needs no --config)\n"
    "Any config key can be overridden as --section.key value or --section.key=value.\n";

namespace {

const char* const kCommands = "train, eval, plan, grads, generate, tokenizer or checkpoint";

// Splits the arguments after the command into --config, the command's own
// flags and config overrides (everything else, checked by the config loader).
void split_arguments(const std::vector<std::string>& args,
                     const std::vector<std::string>& extra_flags, CommandLine& c) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    bool is_extra = arg == "--config";
    for (const std::string& f : extra_flags) is_extra = is_extra || arg == "--" + f;
    if (!is_extra) {
      c.overrides.push_back(args[i]);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) throw InputError("option " + arg + " needs a value");
      value = args[++i];
    }
    if (arg == "--config") {
      c.config_path = value;
    } else {
      c.extra[arg.substr(2)] = value;
    }
  }
  if (c.config_path.empty()) {
    throw InputError("missing --config FILE (e.g. --config configs/llama3_debug.toml)");
  }
}

}  // namespace

CommandLine parse_command_line(const std::vector<std::string>& args) {
  if (args.empty())
    throw InputError(std::string("missing command (expected ") + kCommands + ")\n" + kUsage);
  CommandLine c;
  c.command = args[0];
  if (c.command == "-h" || c.command == "--help" || c.command == "help") {
    c.command = "help";
    return c;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  // "remat train --help": the usage, whatever else is given.
  const bool known = c.command == "train" || c.command == "eval" || c.command == "plan" ||
                     c.command == "grads" || c.command == "generate";
  if (known && std::any_of(rest.begin(), rest.end(),
                           [](const std::string& a) { return a == "--help" || a == "-h"; })) {
    c.command = "help";
    return c;
  }
  // A value written after a flag that takes none ("--ids true") would read
  // as a stray word; named here instead.
  auto no_value_after = [&](const std::string& flag) {
    const auto it = std::find(rest.begin(), rest.end(), flag);
    if (it != rest.end() && it + 1 != rest.end() && (it + 1)->rfind("--", 0) != 0)
      throw InputError(flag + " takes no value (given, it is on), but '" + *(it + 1) +
                       "' follows it; expected " + flag + " alone");
  };
  if (c.command == "train" || c.command == "eval") {
    split_arguments(rest, {}, c);
  } else if (c.command == "plan") {
    // Flags without values: pulled out before the config overrides.
    for (const char* flag : {"--json", "--mm", "--torchtitan", "--explain"}) no_value_after(flag);
    std::vector<std::string> others;
    for (const std::string& arg : rest) {
      if (arg == "--json") {
        c.json = true;
      } else if (arg == "--mm") {
        c.matmuls = true;
      } else if (arg == "--torchtitan") {
        c.torchtitan = true;
      } else if (arg == "--explain") {
        c.explain = true;
      } else {
        others.push_back(arg);
      }
    }
    split_arguments(others, {"pareto", "maximize", "timeline", "timeline-compare"}, c);
    if (c.extra.count("timeline-compare") && !c.extra.count("timeline"))
      throw InputError("--timeline-compare MODE needs --timeline FILE.svg");
    if (auto it = c.extra.find("timeline-compare"); it != c.extra.end() && it->second.empty())
      throw InputError("--timeline-compare: empty; expected an AC mode such as none or full");
    if (auto it = c.extra.find("maximize"); it != c.extra.end() && it->second != "throughput") {
      throw InputError("--maximize " + it->second + ": expected \"throughput\"");
    }
  } else if (c.command == "grads") {
    split_arguments(rest, {"tokens", "out"}, c);
    if (!c.extra.count("tokens") || !c.extra.count("out"))
      throw InputError("grads needs --tokens FILE.npy and --out FILE.safetensors");
  } else if (c.command == "generate") {
    no_value_after("--ids");
    std::vector<std::string> others;
    for (const std::string& arg : rest) {
      if (arg == "--ids") {
        c.ids = true;
      } else {
        others.push_back(arg);
      }
    }
    split_arguments(others, {"prompt", "max_new_tokens", "temperature", "top_k", "top_p", "seed"},
                    c);
    if (!c.extra.count("prompt"))
      throw InputError("generate needs --prompt TEXT, the text to continue");
  } else {
    throw InputError("unknown command '" + c.command + "' (expected " + kCommands + ")\n" + kUsage);
  }
  return c;
}

std::set<std::string> override_keys(const std::vector<std::string>& overrides) {
  std::set<std::string> keys;
  for (const std::string& arg : overrides)
    if (arg.starts_with("--")) keys.insert(arg.substr(2, arg.find('=') - 2));
  return keys;
}

}  // namespace remat
