// Tokenizers: text <-> token ids.
//
// The byte-level tokenizer is the default: token ids 0..255 are the bytes of
// UTF-8 text, 256 marks the beginning of a document (BOS) and 257 its end
// (EOS). It needs no vocabulary file, so any text trains a model of
// vocab_size >= 258. A SentencePiece .model file (io/sentencepiece.h) and a
// Hugging Face byte-level BPE tokenizer.json (io/hf_tokenizer.h) are the
// other kinds; the job chooses with model.tokenizer_path (or model.tokenizer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "io/config.h"

namespace remat {

// What the data loader and the samplers need of any tokenizer. One virtual
// call per document or per decoded span, never per byte.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Every id encode() and append_document() produce is < vocab_size().
  virtual int64_t vocab_size() const = 0;
  // The ids of `text`, no BOS/EOS.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Appends BOS (if the tokenizer has one), the ids of `document`, EOS (if
  // it has one): how training text is fed.
  virtual void append_document(std::string_view document, std::vector<int32_t>& out) const = 0;
  // Ids back to text; BOS and EOS are dropped.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The ids append_document() puts before and after a document, -1 where it
  // puts none: a generated text starts with BOS and stops at EOS.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
};

// A tokenizer that cannot serve the model as configured (the byte tokenizer
// under too small a model.vocab_size): the model's settings are at fault,
// not the data it was about to read, and messages say so.
class TokenizerMismatch : public InputError {
 public:
  using InputError::InputError;
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int64_t kMinVocabSize = 258;

  // vocab_size < 258 throws InputError: the model could not embed BOS/EOS.
  explicit ByteTokenizer(int64_t vocab_size);

  int64_t vocab_size() const override { return vocab_size_; }
  // The bytes of `text` as ids 0..255.
  std::vector<int32_t> encode(std::string_view text) const override;
  void append_document(std::string_view document, std::vector<int32_t>& out) const override;
  // Ids outside 0..257 (unused rows of a larger vocabulary) become U+FFFD so
  // sampled text stays readable.
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }

 private:
  int64_t vocab_size_;
};

// A tokenizer file by its name: a path ending in .json is a Hugging Face
// tokenizer.json, any other a SentencePiece .model. InputError (naming `key`)
// for a missing or invalid file.
std::unique_ptr<Tokenizer> open_tokenizer_file(const std::string& path, const std::string& key);

// `tokenizer` is "byte" (the byte tokenizer for a model of `vocab_size`) or
// the path of a tokenizer file (open_tokenizer_file), whose own vocabulary must then be
// exactly `vocab_size`. InputError for a missing or invalid file or a
// mismatched size; messages name model.tokenizer.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& tokenizer, int64_t vocab_size);

// Settles the job's tokenizer before anything is built from the config:
// model.tokenizer_path, when set, becomes model.tokenizer (torchtitan's name
// for it; setting both to different files is an InputError), and for a
// tokenizer file model.vocab_size follows its vocabulary unless set, a set
// one that differs being an InputError. The byte tokenizer changes nothing.
void resolve_tokenizer(JobConfig& config);

}  // namespace remat
