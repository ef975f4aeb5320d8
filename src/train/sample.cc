#include "train/sample.h"

#include <cstdio>
#include <vector>

#include "generate/generate.h"

namespace remat {

namespace {

constexpr int64_t kSampleTokens = 32;

// The length of the valid UTF-8 sequence at text[i], 0 if there is none.
size_t utf8_length(const std::string& text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const size_t n = lead < 0x80                   ? 1
                   : lead >= 0xc2 && lead < 0xe0 ? 2
                   : lead >= 0xe0 && lead < 0xf0 ? 3
                   : lead >= 0xf0 && lead < 0xf5 ? 4
                                                 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t j = 1; j < n; ++j) {
    if ((static_cast<unsigned char>(text[i + j]) & 0xc0) != 0x80) return 0;
  }
  // No overlong forms, no surrogates, nothing above U+10FFFF.
  const auto second = n > 1 ? static_cast<unsigned char>(text[i + 1]) : 0x80;
  if ((lead == 0xe0 && second < 0xa0) || (lead == 0xed && second >= 0xa0) ||
      (lead == 0xf0 && second < 0x90) || (lead == 0xf4 && second >= 0x90)) {
    return 0;
  }
  return n;
}

// One printable line: a model's bytes need not be UTF-8, and its text has
// newlines, so control bytes and bytes outside a valid UTF-8 sequence are
// escaped as in C.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    const auto byte = static_cast<unsigned char>(ch);
    const size_t n = utf8_length(text, i);
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
