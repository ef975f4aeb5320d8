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
  // sentencepiece `encode`): the model's normalization, no BOS/EOS. A text
  // longer than kPieceBytes goes to the library in pieces (encode_in_pieces).
  std::vector<int32_t> encode(std::string_view text) const override;
  // The library holds about 190 bytes per byte of one Encode's input (1.5 MB
  // of text: 287 MB), so a text file of 100 MB, one document, would take
  // 19 GB. Where the model is BPE, adds its dummy-prefix space to every input
  // and no piece spans a space, the text is cut at single spaces between two ASCII
  // letters or digits, every `piece_bytes` or so, the space dropped: each
  // piece's dummy prefix stands for it, and the ids are one Encode's. Else
  // (or with no such space near a cut) whole, refused when it would need
  // more than the machine's memory.
  std::vector<int32_t> encode_in_pieces(std::string_view text, size_t piece_bytes) const;
  static constexpr size_t kPieceBytes = size_t{1} << 16;
  // Whether encode_in_pieces cuts at all with this model.
  bool cuts_long_texts() const { return cuts_at_spaces_; }
  // BOS and EOS are added where the model defines them (bos_id/eos_id >= 0).
  void append_document(std::string_view document, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t bos_id() const override;
  int32_t eos_id() const override;

 private:
  std::vector<int32_t> encode_whole(std::string_view text) const;
  bool cuts_at_spaces() const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::string path_;
  // Whether this model's ids of "a b" are those of "a" then of "b" (the
  // dummy prefix on every input, no piece across a space), tried on words
  // of the model's own vocabulary when it is loaded.
  bool cuts_at_spaces_ = false;
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
