#include "cli/tokenizer_command.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "io/files.h"
#include "io/sentencepiece.h"
#include "io/tokenizer.h"

namespace remat {
namespace {

constexpr const char* kTokenizerUsage =
    "usage: remat tokenizer train --input FILE --vocab_size N --output FILE.model "
    "[--model_type bpe|unigram]\n"
    "       remat tokenizer encode --model FILE.model|tokenizer.json --input FILE\n";

// --flag value or --flag=value, each flag one of `known` and given once.
std::map<std::string, std::string> parse_flags(const std::vector<std::string>& args,
                                               const std::vector<std::string>& known) {
  std::map<std::string, std::string> flags;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string name = args[i], value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      throw InputError("tokenizer " + args[0] + ": " + name + " needs a value\n" + kTokenizerUsage);
    }
    bool is_known = false;
    for (const std::string& k : known) is_known = is_known || name == "--" + k;
    if (!is_known || flags.count(name.substr(2)))
      throw InputError("tokenizer " + args[0] + ": " + (is_known ? "repeated" : "unknown") +
                       " option " + name + "\n" + kTokenizerUsage);
    flags[name.substr(2)] = value;
  }
  return flags;
}

const std::string& required(const std::map<std::string, std::string>& flags,
                            const std::string& command, const std::string& name) {
  const auto it = flags.find(name);
  if (it == flags.end() || it->second.empty())
    throw InputError("tokenizer " + command + " needs --" + name + "\n" + kTokenizerUsage);
  return it->second;
}

int64_t parse_vocab_size(const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw InputError("tokenizer train: --vocab_size " + text +
                     ": expected an integer from 4 to 2147483647");
  return value;
}

int train(const std::vector<std::string>& args) {
  const auto flags = parse_flags(args, {"input", "vocab_size", "output", "model_type"});
  SentencePieceTrainOptions options;
  options.input = required(flags, "train", "input");
  options.vocab_size = parse_vocab_size(required(flags, "train", "vocab_size"));
  options.output = required(flags, "train", "output");
  if (const auto it = flags.find("model_type"); it != flags.end()) options.model_type = it->second;
  train_sentencepiece(options);
  std::printf("tokenizer: %s (%s, %lld tokens) trained on %s\n", options.output.c_str(),
              options.model_type.c_str(), static_cast<long long>(options.vocab_size),
              options.input.c_str());
  return 0;
}

// Each line of the input (split at '\n') encoded alone, its ids on one line.
int encode(const std::vector<std::string>& args) {
  const auto flags = parse_flags(args, {"model", "input"});
  const auto tokenizer = open_tokenizer_file(required(flags, "encode", "model"), "--model");
  const std::string& input = required(flags, "encode", "input");
  std::istringstream lines(
      read_regular_file(input, "tokenizer encode --input", "a text file", int64_t{1} << 30));
  std::string line, out;
  while (std::getline(lines, line)) {
    out.clear();
    for (int32_t id : tokenizer->encode(line)) {
      if (!out.empty()) out += ' ';
      out += std::to_string(id);
    }
    std::printf("%s\n", out.c_str());
  }
  return 0;
}

}  // namespace

int run_tokenizer_command(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "train") return train(args);
  if (!args.empty() && args[0] == "encode") return encode(args);
  throw InputError(std::string("tokenizer: expected a subcommand, train or encode\n") +
                   kTokenizerUsage);
}

}  // namespace remat
