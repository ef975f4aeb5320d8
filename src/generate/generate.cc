#include "generate/generate.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace remat {

std::vector<int32_t> generate(Decoder& decoder, Sampler& sampler, std::span<const int32_t> prompt,
                              int64_t max_new_tokens, int32_t eos_id,
                              const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt has no tokens");
  std::vector<int32_t> out;
  if (max_new_tokens <= 0) return out;
  // The prompt goes in chunks: a pass of n tokens holds n rows of every
  // activation and of the logits, so a long prompt in one pass took memory
  // in proportion to its length on top of the cache (a 20,401-token prompt
  // on the debug model: 462 MiB in one pass, 268 MiB in chunks, 250 MiB of
  // it the cache). Only the last chunk's logits are used.
  std::vector<float> logits;
  for (size_t first = 0; first < prompt.size(); first += kPrefillChunk) {
    logits = decoder.append(prompt.subspan(first, std::min(kPrefillChunk, prompt.size() - first)));
  }
  const auto vocab = static_cast<size_t>(decoder.vocab_size());
  std::span<const float> last(logits.data() + logits.size() - vocab, vocab);
  while (true) {
    const int32_t id = sampler.next(last);
    out.push_back(id);
    if (on_token) on_token(id);
    if (id == eos_id || static_cast<int64_t>(out.size()) == max_new_tokens) return out;
    logits = decoder.append(std::span<const int32_t>(&out.back(), 1));
    last = std::span<const float>(logits.data(), vocab);
  }
}

std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  const std::vector<int32_t> body = tokenizer.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

TextStream::TextStream(const Tokenizer& tokenizer, FILE* out, std::vector<int32_t> ids)
    : tokenizer_(tokenizer), out_(out), ids_(std::move(ids)) {}

void TextStream::add(int32_t id) {
  ids_.push_back(id);
  print(/*all=*/false);
}

void TextStream::finish() { print(/*all=*/true); }

void TextStream::print(bool all) {
  const std::string text = tokenizer_.decode(ids_);
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  size_t end = text.size();
  while (!all && end >= printed_ + kReplacement.size() &&
         std::string_view(text).substr(end - kReplacement.size(), kReplacement.size()) ==
             kReplacement) {
    end -= kReplacement.size();
  }
  if (end > printed_) {
    std::fwrite(text.data() + printed_, 1, end - printed_, out_);
    printed_ = end;
  }
  std::fflush(out_);
}

}  // namespace remat
