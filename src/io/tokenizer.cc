#include "io/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "io/hf_tokenizer.h"
#include "io/sentencepiece.h"

namespace remat {

ByteTokenizer::ByteTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {
  if (vocab_size < kMinVocabSize)
    throw TokenizerMismatch("model.vocab_size = " + std::to_string(vocab_size) +
                            ": the byte tokenizer needs " + std::to_string(kMinVocabSize) +
                            " ids (256 bytes + BOS + EOS); expected model.vocab_size >= " +
                            std::to_string(kMinVocabSize) +
                            ", or a tokenizer file (model.tokenizer_path)");
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

void ByteTokenizer::append_document(std::string_view document, std::vector<int32_t>& out) const {
  out.push_back(kBos);
  for (char c : document) out.push_back(static_cast<unsigned char>(c));
  out.push_back(kEos);
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id >= 0 && id < 256)
      text.push_back(static_cast<char>(id));
    else if (id != kBos && id != kEos)
      text += "\xEF\xBF\xBD";  // U+FFFD
  }
  return text;
}

std::unique_ptr<Tokenizer> open_tokenizer_file(const std::string& path, const std::string& key) {
  // A name such as "gpt2" or "llama3" reads as a file name here: say which
  // names remat knows instead of only that no such file exists.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) {
    const char* const files = "a SentencePiece .model file or a Hugging Face tokenizer.json";
    throw InputError(key + " = \"" + path + "\": no such file" +
                     (key == "model.tokenizer"
                          ? std::string(", and remat has no built-in tokenizer of that name; "
                                        "expected \"byte\" (the built-in byte tokenizer), ") +
                                files
                          : std::string("; expected the path of ") + files));
  }
  if (path.ends_with(".json")) return std::make_unique<HfBpeTokenizer>(path, key);
  return std::make_unique<SentencePieceTokenizer>(path, key);
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& tokenizer, int64_t vocab_size) {
  if (tokenizer == "byte") return std::make_unique<ByteTokenizer>(vocab_size);
  auto file = open_tokenizer_file(tokenizer, "model.tokenizer");
  if (file->vocab_size() != vocab_size)
    throw InputError("model.tokenizer = \"" + tokenizer + "\" has " +
                     std::to_string(file->vocab_size()) + " tokens, but model.vocab_size = " +
                     std::to_string(vocab_size) + "; leave model.vocab_size unset to follow it");
  return file;
}

void resolve_tokenizer(JobConfig& config) {
  auto& m = config.model;
  if (!m.tokenizer_path.empty()) {
    if (m.tokenizer != "byte" && m.tokenizer != m.tokenizer_path)
      throw InputError("model.tokenizer = \"" + m.tokenizer + "\" and model.tokenizer_path = \"" +
                       m.tokenizer_path + "\" name two tokenizers; set only one");
    m.tokenizer = m.tokenizer_path;
  }
  if (m.tokenizer == "byte") return;
  const std::string key = m.tokenizer_path.empty() ? "model.tokenizer" : "model.tokenizer_path";
  const int64_t size = open_tokenizer_file(m.tokenizer, key)->vocab_size();
  if (m.vocab_size != 0 && m.vocab_size != size)
    throw InputError("model.vocab_size = " + std::to_string(m.vocab_size) + " differs from the " +
                     std::to_string(size) + " tokens of " + key + " = \"" + m.tokenizer +
                     "\"; leave model.vocab_size unset to follow the tokenizer");
  m.vocab_size = size;
}

}  // namespace remat
