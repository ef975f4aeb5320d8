// The generation loop (decoder + sampler) and the streaming of its text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "generate/decoder.h"
#include "generate/sampler.h"
#include "io/tokenizer.h"

namespace remat {

// The prompt tokens one decoder pass takes (generate() feeds a longer prompt
// in passes of this many).
inline constexpr size_t kPrefillChunk = 512;

// Feeds `prompt` (at least one token) to a fresh decoder, then samples up to
// `max_new_tokens` tokens, feeding each back; calls on_token with each one as
// soon as it is picked, and stops after `eos_id` (-1: never). Returns the new
// tokens (the EOS included). The decoder's cache must hold
// prompt.size() + max_new_tokens - 1 positions.
std::vector<int32_t> generate(Decoder& decoder, Sampler& sampler, std::span<const int32_t> prompt,
                              int64_t max_new_tokens, int32_t eos_id,
                              const std::function<void(int32_t)>& on_token = {});

// The ids a prompt is fed as: BOS (when the tokenizer has one, as every
// training document starts with it), then the text's ids.
std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::string& text);

// Prints text as its tokens come, flushing each time. A token's text can
// depend on its neighbours (SentencePiece drops the space of a text's first
// piece; one character can span tokens), so each call decodes all tokens so
// far and prints what is new; a trailing U+FFFD, which may be a character
// whose bytes are still to come, is held back until then (or finish()).
class TextStream {
 public:
  // `ids`: the tokens already there (e.g. the prompt); add() prints them first.
  TextStream(const Tokenizer& tokenizer, FILE* out, std::vector<int32_t> ids = {});
  void add(int32_t id);
  void finish();  // prints whatever was held back

 private:
  void print(bool all);

  const Tokenizer& tokenizer_;
  FILE* out_;
  std::vector<int32_t> ids_;
  size_t printed_ = 0;  // bytes of decode(ids_) already printed
};

}  // namespace remat
