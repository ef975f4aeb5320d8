#include "train/sample.h"

#include <cstdio>
#include <vector>

#include "core/format.h"
#include "generate/generate.h"

namespace remat {

namespace {

constexpr int64_t kSampleTokens = 32;

// One printable line: a model's bytes need not be UTF-8, and its text has
// newlines, so control bytes and bytes outside a valid UTF-8 sequence are
// escaped as in C.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    const auto byte = static_cast<unsigned char>(ch);
    const size_t n = utf8_sequence_length(text, i);
    if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (n == 0 || byte < 0x20 || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out.append(text, i, n);
      i += n;
      continue;
    }
    ++i;
  }
  return out + "\"";
}

}  // namespace

std::string training_sample(const JobConfig& config, const ModelState& state, Allocator& allocator,
                            const Tokenizer& tokenizer) {
  std::vector<int32_t> ids = prompt_ids(tokenizer, "The");
  Decoder decoder(config.model, state, allocator, static_cast<int64_t>(ids.size()) + kSampleTokens);
  SamplingOptions options;
  options.seed = static_cast<uint64_t>(config.training.seed);
  Sampler sampler(options);
  const std::vector<int32_t> generated =
      generate(decoder, sampler, ids, kSampleTokens, tokenizer.eos_id());
  ids.insert(ids.end(), generated.begin(), generated.end());
  return quoted(tokenizer.decode(ids));
}

}  // namespace remat
