#include "io/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "core/host_memory.h"
#include "io/files.h"

namespace remat {
namespace {

// The largest .model or training text read; Llama 2's model is 500 KB, and
// training text beyond this would take SentencePiece hours anyway.
constexpr int64_t kMaxModelBytes = int64_t{1} << 30;
constexpr int64_t kMaxTrainingTextBytes = int64_t{4} << 30;

// The training text, line by line, as SentencePiece reads a text file; read
// through files.h so a device or FIFO given as --input is refused, not read.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::string& text) : lines_(text) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    if (rest_.empty()) {
      done_ = !std::getline(lines_, whole_);
      if (done_) return;
      rest_ = whole_;
    }
    if (rest_.size() <= kMaxSentenceBytes) {
      line_ = std::string(rest_);
      rest_ = {};
      return;
    }
    // A longer line goes in pieces: the trainer skips a line over its
    // max_sentence_length whole, with only a warning (a text of long
    // paragraphs trained on nothing). Cut at the last space before the
    // limit, dropped; else at a UTF-8 character boundary.
    size_t cut = rest_.rfind(' ', kMaxSentenceBytes);
    size_t skip = 1;
    if (cut == std::string_view::npos || cut == 0) {
      cut = kMaxSentenceBytes;
      while (cut > 1 && (static_cast<uint8_t>(rest_[cut]) & 0xC0) == 0x80) --cut;
      skip = 0;
    }
    line_ = std::string(rest_.substr(0, cut));
    rest_ = rest_.substr(cut + skip);
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

  // SentencePiece's default max_sentence_length, passed to it explicitly.
  static constexpr size_t kMaxSentenceBytes = 4192;

 private:
  std::istringstream lines_;
  std::string whole_;      // the text's current line
  std::string_view rest_;  // what of it is still to come
  std::string line_;
  bool done_ = false;
};

// The library's message without the source location and failed condition
// it starts with ("./src/x.cc(660) [cond] Vocabulary size too high ...").
std::string message_of(const sentencepiece::util::Status& status) {
  const std::string message = status.message();
  const size_t end = message.find("] ");
  if (message.rfind("./", 0) == 0 && end != std::string::npos) return message.substr(end + 2);
  return message.rfind("./", 0) == 0 ? "" : message;
}

void check_train_options(const SentencePieceTrainOptions& o) {
  if (o.vocab_size <= 3 || o.vocab_size > std::numeric_limits<int32_t>::max())
    throw InputError("tokenizer train: --vocab_size " + std::to_string(o.vocab_size) +
                     ": expected an integer from 4 to 2147483647 (ids 0-2 are the unknown, "
                     "begin and end pieces, the text needs ids of its own, and SentencePiece "
                     "counts them in 32 bits)");
  if (o.model_type != "bpe" && o.model_type != "unigram")
    throw InputError("tokenizer train: --model_type " + o.model_type +
                     ": expected \"bpe\" or \"unigram\"");
}

// Protocol-buffer wire format, as far as reading one enum needs: a varint at
// `at`, advancing it; false past the end or beyond 10 bytes.
bool read_varint(std::string_view bytes, size_t& at, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && at < bytes.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(bytes[at++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// The varint of field `field` in the message `bytes`, or of the message in
// its field `outer` (0: `bytes` itself); nullopt when absent or malformed.
std::optional<uint64_t> varint_field(std::string_view bytes, uint32_t outer, uint32_t field) {
  size_t at = 0;
  while (at < bytes.size()) {
    uint64_t key = 0, value = 0;
    if (!read_varint(bytes, at, key)) return std::nullopt;
    const auto number = static_cast<uint32_t>(key >> 3);
    switch (key & 7) {
      case 0:  // varint
        if (!read_varint(bytes, at, value)) return std::nullopt;
        if (outer == 0 && number == field) return value;
        break;
      case 1:  // 64-bit
        at += 8;
        break;
      case 5:  // 32-bit
        at += 4;
        break;
      case 2: {  // length-delimited
        if (!read_varint(bytes, at, value) || value > bytes.size() - at) return std::nullopt;
        if (outer != 0 && number == outer) return varint_field(bytes.substr(at, value), 0, field);
        at += value;
        break;
      }
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

// The payloads of every length-delimited field `field` of the message
// `bytes`, in order; nullopt when the message is malformed.
std::optional<std::vector<std::string_view>> message_fields(std::string_view bytes,
                                                            uint32_t field) {
  std::vector<std::string_view> found;
  size_t at = 0;
  while (at < bytes.size()) {
    uint64_t key = 0, value = 0;
    if (!read_varint(bytes, at, key)) return std::nullopt;
    switch (key & 7) {
      case 0:
        if (!read_varint(bytes, at, value)) return std::nullopt;
        break;
      case 1:
        at += 8;
        break;
      case 5:
        at += 4;
        break;
      case 2:
        if (!read_varint(bytes, at, value) || value > bytes.size() - at) return std::nullopt;
        if ((key >> 3) == field) found.push_back(bytes.substr(at, value));
        at += value;
        break;
      default:
        return std::nullopt;
    }
  }
  if (at > bytes.size()) return std::nullopt;  // a fixed-width field ran past the end
  return found;
}

// What is wrong with a NormalizerSpec's precompiled_charsmap, "" if nothing.
// SentencePiece's normalizer reads it as a little-endian uint32 trie size,
// a darts-clone double array of that many bytes, then NUL-ended replacement
// strings, and walks the array with no bounds checks: a damaged map made it
// read far outside the buffer (a segfault). So every node reachable from the
// root must keep its 256 child slots inside the array, and every rule it
// reaches must name a string that ends inside the blob. Maps too short to
// hold a trie are left to the library, which refuses them itself.
std::string charsmap_problem(std::string_view blob) {
  if (blob.size() <= 4) return "";
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = trie_bytes << 8 | static_cast<uint8_t>(blob[i]);
  if (trie_bytes >= blob.size()) return "";
  if (trie_bytes > blob.size() - 4) return "its trie runs past the end of the map";
  const std::string_view trie = blob.substr(4, trie_bytes);
  const std::string_view strings = blob.substr(4 + trie_bytes);
  const size_t units = trie.size() / 4;
  if (units == 0) return "its trie is empty";
  auto unit = [&](size_t i) {
    uint32_t u = 0;
    for (int b = 3; b >= 0; --b) u = u << 8 | static_cast<uint8_t>(trie[4 * i + b]);
    return u;
  };
  // darts-clone's unit layout: the offset to the children, the label a child
  // is reached by (bit 31 set: no label), a flag for a value at the child
  // base, and (there) the value itself.
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  auto label = [](uint32_t u) { return u & ((1u << 31) | 0xFFu); };
  std::vector<bool> seen(units, false);
  std::vector<size_t> todo = {0};
  seen[0] = true;
  while (!todo.empty()) {
    const size_t node = todo.back();
    todo.pop_back();
    const size_t base = node ^ offset(unit(node));
    if ((base | 0xFF) >= units) return "its trie points outside itself";
    for (uint32_t c = 0; c < 256; ++c) {
      const size_t child = base ^ c;
      const uint32_t u = unit(child);
      if (label(u) != c) continue;
      const size_t child_base = child ^ offset(u);
      if (child_base >= units) return "its trie points outside itself";
      if ((u >> 8) & 1) {  // a rule ends here: its string starts at the value
        const uint32_t value = unit(child_base) & ((1u << 31) - 1);
        if (value >= strings.size() || strings.find('\0', value) == std::string_view::npos)
          return "a rule's replacement lies outside the map";
      }
      if (!seen[child]) {
        seen[child] = true;
        todo.push_back(child);
      }
    }
  }
  return "";
}

// The first damaged normalizer map of a ModelProto: normalizer_spec (field
// 3) and denormalizer_spec (field 5), each a NormalizerSpec whose
// precompiled_charsmap is field 2. "" when none is damaged.
std::string damaged_normalizer(std::string_view model_proto) {
  for (const uint32_t spec_field : {3u, 5u}) {
    const auto specs = message_fields(model_proto, spec_field);
    if (!specs) return "";  // malformed: the library's parse says so
    for (const std::string_view spec : *specs) {
      const auto maps = message_fields(spec, 2);
      if (!maps) return "";
      for (const std::string_view map : *maps) {
        if (std::string problem = charsmap_problem(map); !problem.empty())
          return (spec_field == 3 ? "its normalizer's" : "its denormalizer's") +
                 std::string(" precompiled character map is damaged: ") + problem;
      }
    }
  }
  return "";
}

// A BPE model: ModelProto.trainer_spec (field 2) .model_type (field 3),
// whose enum has UNIGRAM = 1 (the default when absent) and BPE = 2.
bool is_bpe_model(std::string_view model_proto) {
  return varint_field(model_proto, 2, 3) == std::optional<uint64_t>(2);
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& path, const std::string& key)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()), path_(path) {
  std::string bytes;
  try {
    bytes =
        read_regular_file(path, "tokenizer file", "a SentencePiece .model file", kMaxModelBytes);
  } catch (const InputError& e) {
    throw InputError(key + " = \"" + path + "\": " + e.what());
  }
  if (const std::string problem = damaged_normalizer(bytes); !problem.empty())
    throw InputError(key + " = \"" + path + "\": not a usable SentencePiece .model file (" +
                     problem + ")");
  const auto status = processor_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    const std::string why = message_of(status);
    throw InputError(key + " = \"" + path + "\": not a SentencePiece .model file" +
                     (why.empty() ? "" : " (" + why + ")"));
  }
  // Unigram models take the best path over the whole text, whose scores are
  // sums from its start: where two paths tie (as "!!!" "!" "!" and "!" "!"
  // "!!!" over "!!!!!"), which one wins depends on the sums' rounding, so a
  // piece can segment differently from the whole (python3-sentencepiece
  // showed it). BPE merges pairs within a word, whatever came before.
  cuts_at_spaces_ = is_bpe_model(bytes) && cuts_at_spaces();
}

// Whether the ids of "a b" are always those of "a" then "b" (a, b without
// spaces at their ends): no piece of the vocabulary holds a word boundary
// (a "▁" after something other than "▁"), and every input starts with the
// dummy-prefix "▁", as the ids of a few word pairs show.
bool SentencePieceTokenizer::cuts_at_spaces() const {
  const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  const int size = processor_->GetPieceSize();
  for (int id = 0; id < size; ++id) {
    const std::string& piece = processor_->IdToPiece(id);
    for (size_t at = piece.find(space, 1); at != std::string::npos; at = piece.find(space, at + 1))
      if (piece.compare(at - space.size(), space.size(), space) != 0) return false;
  }
  auto ids = [&](const std::string& text) {
    std::vector<int> out;
    return processor_->Encode(text, &out).ok() ? out : std::vector<int>{-1};
  };
  for (const auto& [a, b] : {std::pair<std::string, std::string>{"a", "b"},
                             {"the", "end"},
                             {"x1", "7y"},
                             {"Hello", "World"}}) {
    std::vector<int> apart = ids(a);
    const std::vector<int> second = ids(b);
    apart.insert(apart.end(), second.begin(), second.end());
    if (ids(a + " " + b) != apart) return false;
  }
  return true;
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::vector<int32_t> SentencePieceTokenizer::encode_whole(std::string_view text) const {
  // About 190 bytes of the library's per byte of input (measured: 287 MB for
  // 1.5 MB); past the machine's memory it would end in std::bad_alloc.
  constexpr double kLibraryBytesPerByte = 200;
  const double needs = kLibraryBytesPerByte * static_cast<double>(text.size());
  if (needs > static_cast<double>(physical_memory_bytes()))
    throw InputError("tokenizer '" + path_ + "' cannot encode a text of " +
                     format_bytes(static_cast<int64_t>(text.size())) +
                     " in one piece: SentencePiece needs about 200 bytes per byte of it (" +
                     format_bytes(static_cast<int64_t>(needs)) + "), more than this machine's " +
                     format_bytes(physical_memory_bytes()) +
                     "; expected shorter documents (a .jsonl of them, or smaller text files)");
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok())
    throw InputError("tokenizer '" + path_ + "' cannot encode text: " + message_of(status));
  return std::vector<int32_t>(ids.begin(), ids.end());
}

namespace {

bool ascii_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// A single space at `i` between two ASCII letters or digits.
bool cut_point(std::string_view text, size_t i) {
  return i > 0 && i + 1 < text.size() && text[i] == ' ' && ascii_alnum(text[i - 1]) &&
         ascii_alnum(text[i + 1]);
}

}  // namespace

std::vector<int32_t> SentencePieceTokenizer::encode_in_pieces(std::string_view text,
                                                              size_t piece_bytes) const {
  if (!cuts_at_spaces_ || text.size() <= piece_bytes) return encode_whole(text);
  std::vector<int32_t> ids;
  size_t start = 0;
  while (text.size() - start > piece_bytes) {
    // The first cut point at or after the piece's nominal end; a text with
    // none left goes whole from here.
    size_t cut = start + piece_bytes;
    while (cut < text.size() && !cut_point(text, cut)) ++cut;
    if (cut >= text.size()) break;
    const std::vector<int32_t> piece = encode_whole(text.substr(start, cut - start));
    ids.insert(ids.end(), piece.begin(), piece.end());
    start = cut + 1;  // the space itself is the next piece's dummy prefix
  }
  const std::vector<int32_t> rest = encode_whole(text.substr(start));
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  return encode_in_pieces(text, kPieceBytes);
}

void SentencePieceTokenizer::append_document(std::string_view document,
                                             std::vector<int32_t>& out) const {
  if (processor_->bos_id() >= 0) out.push_back(processor_->bos_id());
  const std::vector<int32_t> ids = encode(document);
  out.insert(out.end(), ids.begin(), ids.end());
  if (processor_->eos_id() >= 0) out.push_back(processor_->eos_id());
}

int32_t SentencePieceTokenizer::bos_id() const { return processor_->bos_id(); }
int32_t SentencePieceTokenizer::eos_id() const { return processor_->eos_id(); }

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok())
    throw InputError("tokenizer '" + path_ + "' cannot decode ids: " + message_of(status));
  return text;
}

void train_sentencepiece(const SentencePieceTrainOptions& options) {
  check_train_options(options);
  const std::string text = read_regular_file(options.input, "tokenizer train --input",
                                             "a text file to train on", kMaxTrainingTextBytes);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError("tokenizer train: --input '" + options.input + "' holds no text");
  // After the read, so that --output naming the --input is refused here,
  // before training, and not only when the model is written.
  check_output_file(options.output, "--output");
  const std::unordered_map<std::string, std::string> spec = {
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.model_type},
      // Errors only: no per-iteration progress lines, and no warning printed
      // ahead of the failed status, which remat reports as its one message.
      {"minloglevel", "2"},
      {"max_sentence_length", std::to_string(LineIterator::kMaxSentenceBytes)},
  };
  LineIterator lines(text);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(spec, &lines, &model);
  if (!status.ok()) {
    // SentencePiece's advice names its own flags, which remat does not
    // take: keep its finding, give remat's remedy.
    std::string why = message_of(status);
    if (const size_t advice = why.find(" Increase vocab_size"); advice != std::string::npos)
      why = why.substr(0, advice) + " Expected a --vocab_size above the text's number of " +
            "distinct characters (the second number) plus 3.";
    throw InputError("tokenizer train: cannot train on '" + options.input + "' with --vocab_size " +
                     std::to_string(options.vocab_size) + ": " +
                     (why.empty() ? "SentencePiece refused it without a reason" : why));
  }
  AtomicFile out(options.output, "--output", /*make_folders=*/true);
  out.write(model.data(), static_cast<int64_t>(model.size()));
  out.commit();
}

}  // namespace remat
