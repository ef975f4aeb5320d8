#include "io/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <sstream>
#include <unordered_map>

#include "core/error.h"
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
  void Next() override { done_ = !std::getline(lines_, line_); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::istringstream lines_;
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
  if (o.vocab_size <= 3)
    throw InputError("tokenizer train: --vocab_size " + std::to_string(o.vocab_size) +
                     ": expected an integer > 3 (ids 0-2 are the unknown, begin and end "
                     "pieces; the text needs ids of its own)");
  if (o.model_type != "bpe" && o.model_type != "unigram")
    throw InputError("tokenizer train: --model_type " + o.model_type +
                     ": expected \"bpe\" or \"unigram\"");
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
  const auto status = processor_->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    const std::string why = message_of(status);
    throw InputError(key + " = \"" + path + "\": not a SentencePiece .model file" +
                     (why.empty() ? "" : " (" + why + ")"));
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok())
    throw InputError("tokenizer '" + path_ + "' cannot encode text: " + message_of(status));
  return std::vector<int32_t>(ids.begin(), ids.end());
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
      {"minloglevel", "1"},  // warnings only: no per-iteration progress lines
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
