// Hugging Face tokenizer.json files of byte-level BPE: the format of Llama
// 3's (and GPT-2's) released tokenizer. Read with nlohmann-json; the
// pre-tokenizer regexes run with Debian's PCRE2 (UTF + UCP, so \p{L}, \p{N}
// and \s are Unicode classes), whose header stays in hf_tokenizer.cc.
//
// What a file must hold (anything else is an InputError naming the field):
// - "model": {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or
//   [["a", "b"], ...]}, tokens spelled in GPT-2's byte-to-unicode alphabet,
//   all 256 single-byte tokens present, ids in 0 .. 2^22 - 1, no byte
//   fallback, subword prefix or suffix; "ignore_merges" (Llama 3: true)
//   emits a pre-token that is itself in the vocabulary without merging.
// - "normalizer": null (as in Llama 3's).
// - "pre_tokenizer": null, "Split" (a "Regex" or "String" pattern,
//   behavior "Isolated", not inverted), "ByteLevel" (no prefix space;
//   "use_regex" adds GPT-2's split) or a "Sequence" of these.
// - "added_tokens": [{"id", "content"}, ...]: matched in the raw text before
//   pre-tokenization, the longest one first where several start at a byte;
//   their lstrip / rstrip / single_word flags are not honored (all false in
//   Llama 3's file).
// BOS is the added token <|begin_of_text|> or <s>, EOS <|end_of_text|>,
// </s> or <|endoftext|>, when the file has them.
//
// Text need not be valid UTF-8: the regexes never match an invalid byte, so
// each run of them becomes a pre-token of its own and encodes byte by byte.
// decode(encode(x)) == x for any bytes x that hold no BOS or EOS token text.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer.h"

namespace remat {

class HfBpeTokenizer final : public Tokenizer {
 public:
  // Loads a tokenizer.json. `key` names the config key or flag for messages.
  HfBpeTokenizer(const std::string& path, const std::string& key);
  ~HfBpeTokenizer() override;

  // The largest id in the vocabulary or the added tokens, plus one. Ids in
  // between that name no token decode as U+FFFD.
  int64_t vocab_size() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  void append_document(std::string_view document, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;

  int32_t bos_id() const override;  // -1 when the file has none
  int32_t eos_id() const override;

  struct Model;

 private:
  std::unique_ptr<Model> model_;
};

}  // namespace remat
