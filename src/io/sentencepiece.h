// SentencePiece tokenizers through Debian's libsentencepiece: loading a
// .model file (the format of Llama 2 and Mistral) and training one on text.
// The library's headers stay in sentencepiece.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace remat {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads a .model file. `key` names the config key or flag for messages.
  // InputError for an unreadable file or one that is not a SentencePiece model.
  SentencePieceTokenizer(const std::string& path, const std::string& key);
  ~SentencePieceTokenizer() override;

  // The number of pieces (ids 0 .. vocab_size() - 1).
  int64_t vocab_size() const override;
  // Ids as SentencePieceProcessor::Encode gives them (and Python's
  // sentencepiece `encode`): the model's normalization, no BOS/EOS.
  std::vector<int32_t> encode(std::string_view text) const override;
  // BOS and EOS are added where the model defines them (bos_id/eos_id >= 0).
  void append_document(std::string_view document, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string path_;
};

struct SentencePieceTrainOptions {
  std::string input;               // a text file, one sentence per line
  int64_t vocab_size = 0;          // > 0
  std::string model_type = "bpe";  // "bpe" | "unigram"
  std::string output;              // the .model file written
};

// Trains a tokenizer on `options.input` and writes it to `options.output`
// atomically (a temporary renamed into place): a failed run leaves nothing.
// InputError for a bad input file, a bad option, or a vocabulary too large
// for the text (the message says the largest that fits).
void train_sentencepiece(const SentencePieceTrainOptions& options);

}  // namespace remat
