// The byte-level tokenizer: token ids 0..255 are the bytes of UTF-8 text,
// 256 marks the beginning of a document (BOS) and 257 its end (EOS). It needs
// no vocabulary file, so any text trains a model of vocab_size >= 258.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace remat {

class ByteTokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int64_t kMinVocabSize = 258;

  // vocab_size < 258 throws InputError: the model could not embed BOS/EOS.
  explicit ByteTokenizer(int64_t vocab_size);

  int64_t vocab_size() const { return vocab_size_; }

  // The bytes of `text` as ids 0..255, no BOS/EOS.
  std::vector<int32_t> encode(std::string_view text) const;
  // Appends BOS, the bytes of `document`, EOS: how training text is fed.
  void append_document(std::string_view document, std::vector<int32_t>& out) const;
  // Bytes back to text. BOS and EOS are dropped; ids outside 0..257 (unused
  // rows of a larger vocabulary) become U+FFFD so sampled text stays readable.
  std::string decode(std::span<const int32_t> ids) const;

 private:
  int64_t vocab_size_;
};

}  // namespace remat
