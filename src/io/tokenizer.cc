#include "io/tokenizer.h"

#include "core/error.h"

namespace remat {

ByteTokenizer::ByteTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {
  if (vocab_size < kMinVocabSize)
    throw InputError("tokenizer error: the byte tokenizer needs model.vocab_size >= " +
                     std::to_string(kMinVocabSize) + " (256 bytes + BOS + EOS), got " +
                     std::to_string(vocab_size));
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

}  // namespace remat
