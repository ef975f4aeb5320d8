#include "io/dataset.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "core/progress.h"
#include "io/files.h"
#include "io/json_error.h"
#include "io/npy.h"
#include "io/tokenizer.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

// 1234567 -> "1,234,567": token counts are read by people in the log.
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A text file becomes 4-byte token ids (plus its own bytes while it is
// tokenised), so one larger than a fifth of the RAM cannot be loaded: say so
// up front instead of failing in the allocator.
int64_t max_text_bytes() {
  const int64_t ram = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  return std::max<int64_t>(ram / 5, 1 << 20);
}

std::string read_text_file(const std::string& path) {
  try {
    return read_regular_file(path, "dataset file", "a regular text or JSONL file",
                             max_text_bytes());
  } catch (const InputError& e) {
    throw InputError(std::string("dataset error: ") + e.what());
  }
}

bool has_extension(const std::string& path, const std::string& ext) {
  std::string actual = fs::path(path).extension().string();
  std::transform(actual.begin(), actual.end(), actual.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return actual == ext;
}

// Each line is {"text": "..."}; other fields are ignored.
int64_t append_jsonl(const std::string& path, const std::string& content,
                     const Tokenizer& tokenizer, std::vector<int32_t>& out) {
  int64_t documents = 0;
  std::istringstream lines(content);
  std::string line;
  Progress progress("reading " + path, static_cast<int64_t>(content.size()), ProgressUnit::kBytes);
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    progress.update(lines.eof() ? static_cast<int64_t>(content.size())
                                : static_cast<int64_t>(lines.tellg()));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = "dataset error: '" + path + "' line " + std::to_string(number);
    nlohmann::json record;
    if (const std::string problem = json_text_problem(line); !problem.empty())
      throw InputError(where + ": " + problem);
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e9999
      throw InputError(where + ": invalid JSON (" + json_error_text(e) + ")");
    }
    if (!record.is_object() || !record.contains("text") || !record["text"].is_string())
      throw InputError(where + ": expected a JSON object with a string field \"text\"");
    tokenizer.append_document(record["text"].get_ref<const std::string&>(), out);
    ++documents;
  }
  return documents;
}

// Splits a fortune file at lines holding only "%" and appends each quote.
int64_t append_fortunes(const std::string& content, const Tokenizer& tokenizer, TokenDataset& out) {
  int64_t quotes = 0;
  std::string quote;
  auto flush = [&] {
    if (quote.find_first_not_of(" \t\r\n") != std::string::npos) {
      out.document_starts.push_back(static_cast<int64_t>(out.tokens.size()));
      tokenizer.append_document(quote, out.tokens);
      ++quotes;
    }
    quote.clear();
  };
  std::istringstream lines(content);
  std::string line;
  while (std::getline(lines, line)) {
    if (line == "%" || line == "%\r")
      flush();
    else
      quote += line + "\n";
  }
  flush();
  return quotes;
}

}  // namespace

TokenDataset load_token_file(const std::string& path, const std::string& tokenizer,
                             int64_t vocab_size) {
  TokenDataset data;
  if (has_extension(path, ".npy")) {
    data.tokens = read_npy_tokens(path);
    for (size_t i = 0; i < data.tokens.size(); ++i)
      if (data.tokens[i] >= vocab_size)
        throw InputError("dataset error: '" + path + "': token at index " + std::to_string(i) +
                         " is " + std::to_string(data.tokens[i]) +
                         ", expected ids < model.vocab_size = " + std::to_string(vocab_size));
    data.description = "'" + path + "' (token ids): " + with_commas(data.tokens.size()) + " tokens";
    return data;
  }
  const std::unique_ptr<Tokenizer> text_tokenizer = make_tokenizer(tokenizer, vocab_size);
  const std::string content = read_text_file(path);
  if (has_extension(path, ".jsonl")) {
    const int64_t documents = append_jsonl(path, content, *text_tokenizer, data.tokens);
    data.description = "'" + path + "' (JSONL, " + with_commas(documents) +
                       " documents): " + with_commas(data.tokens.size()) + " tokens";
  } else {
    text_tokenizer->append_document(content, data.tokens);
    data.description = "'" + path + "' (text): " + with_commas(data.tokens.size()) + " tokens";
  }
  return data;
}

TokenDataset load_fortunes(const std::string& dir, int64_t vocab_size,
                           const std::string& tokenizer) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(
        "dataset error: the default dataset 'fortunes' needs the Debian package "
        "`fortunes`, whose quotes live in " +
        dir +
        ", which is missing; install it (apt-get install fortunes; `make run` "
        "does it) or set training.dataset_path to a .txt, .jsonl or .npy file");
  const std::unique_ptr<Tokenizer> text_tokenizer = make_tokenizer(tokenizer, vocab_size);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path& p = entry.path();
    const std::string name = p.filename().string();
    if (name.starts_with(".") || p.extension() == ".dat" || p.extension() == ".u8") continue;
    if (!entry.is_regular_file(ec)) continue;  // subdirectories such as off/
    files.push_back(p.string());
  }
  if (ec) throw InputError("dataset error: cannot list " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());

  TokenDataset data;
  int64_t quotes = 0;
  Progress progress("reading the fortunes in " + dir + " (files)",
                    static_cast<int64_t>(files.size()), ProgressUnit::kItems);
  for (size_t i = 0; i < files.size(); ++i) {
    quotes += append_fortunes(read_text_file(files[i]), *text_tokenizer, data);
    progress.update(static_cast<int64_t>(i + 1));
  }
  if (data.tokens.empty())
    throw InputError("dataset error: no fortune files found in " + dir +
                     "; reinstall the Debian package `fortunes`");
  data.description = "fortunes (" + std::to_string(files.size()) + " files in " + dir + ", " +
                     with_commas(quotes) + " quotes): " + with_commas(data.tokens.size()) +
                     " tokens";
  return data;
}

TokenDataset load_training_tokens(const JobConfig& cfg, int64_t vocab_size) {
  const auto& t = cfg.training;
  if (!t.dataset_path.empty())
    return load_token_file(t.dataset_path, cfg.model.tokenizer, vocab_size);
  // torchtitan's own datasets come from the Hugging Face hub; no run
  // downloads anything (spec.md §7), so a torchtitan config says what to do.
  const bool torchtitans = t.dataset == "c4" || t.dataset == "c4_test";
  if (t.dataset != "fortunes")
    throw InputError("config error: training.dataset = \"" + t.dataset +
                     "\": unknown dataset (known: fortunes)" +
                     (torchtitans ? "; it is torchtitan's, which remat does not ship and no run "
                                    "downloads; give the text as a file instead:"
                                  : "; or") +
                     " set training.dataset_path (--training.dataset_path FILE) to a .txt, "
                     ".jsonl (a \"text\" field per line) or .npy token file");
  return load_fortunes(kFortunesDir, vocab_size, cfg.model.tokenizer);
}

HeldOutSplit split_held_out(const TokenDataset& data, double fraction) {
  const std::vector<int32_t>& tokens = data.tokens;
  const auto n = static_cast<int64_t>(tokens.size());
  const auto tail = static_cast<int64_t>(static_cast<double>(n) * fraction);
  const int64_t from = std::clamp<int64_t>(n - tail, std::min<int64_t>(1, n), n);
  const auto start =
      std::lower_bound(data.document_starts.begin(), data.document_starts.end(), from);
  const auto cut = start == data.document_starts.end() ? tokens.end() : tokens.begin() + *start;
  if (cut == tokens.end())
    throw InputError("dataset error: no document starts in the last " +
                     std::to_string(fraction * 100) +
                     "% of the data, so none can be held out "
                     "for validation; set validation.dataset to a file");
  return {std::vector<int32_t>(tokens.begin(), cut), std::vector<int32_t>(cut, tokens.end())};
}

BatchLoader::BatchLoader(std::vector<int32_t> tokens, int64_t batch_size, int64_t seq_len,
                         std::string dataset_name)
    : tokens_(std::move(tokens)), batch_size_(batch_size), seq_len_(seq_len) {
  if (batch_size <= 0 || seq_len <= 0)
    throw std::invalid_argument("BatchLoader: batch_size and seq_len must be > 0");
  const int64_t n = static_cast<int64_t>(tokens_.size());
  if (n < seq_len + 1)
    throw InputError("dataset error: " + dataset_name + " has " + with_commas(n) +
                     " tokens, fewer than training.seq_len + 1 = " + with_commas(seq_len + 1) +
                     " needed for one training sequence; use a smaller seq_len or more data");
  num_windows_ = (n - 1) / seq_len;
}

void BatchLoader::set_position(int64_t window) {
  if (window < 0 || window >= num_windows_)
    throw std::out_of_range("BatchLoader::set_position: window " + std::to_string(window) +
                            " not in [0, " + std::to_string(num_windows_) + ")");
  position_ = window;
}

void BatchLoader::next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const size_t size = static_cast<size_t>(batch_size_ * seq_len_);
  if (inputs.size() != size || targets.size() != size)
    throw std::invalid_argument("BatchLoader::next: spans must hold batch_size * seq_len ids");
  for (int64_t row = 0; row < batch_size_; ++row) {
    const int32_t* window = tokens_.data() + position_ * seq_len_;
    std::copy_n(window, seq_len_, inputs.data() + row * seq_len_);
    std::copy_n(window + 1, seq_len_, targets.data() + row * seq_len_);
    position_ = (position_ + 1) % num_windows_;
  }
}

int64_t count_eval_rows(int64_t num_tokens, int64_t seq_len) {
  if (seq_len <= 0) throw std::invalid_argument("count_eval_rows: seq_len must be > 0");
  return num_tokens / (seq_len + 1);
}

void fill_eval_rows(std::span<const int32_t> tokens, int64_t seq_len, int64_t first_row,
                    int64_t count, std::span<int32_t> inputs, std::span<int32_t> targets) {
  const int64_t rows = count_eval_rows(static_cast<int64_t>(tokens.size()), seq_len);
  if (first_row < 0 || count < 0 || first_row + count > rows)
    throw std::out_of_range("fill_eval_rows: rows [" + std::to_string(first_row) + ", " +
                            std::to_string(first_row + count) + ") not within " +
                            std::to_string(rows));
  const size_t size = static_cast<size_t>(count * seq_len);
  if (inputs.size() != size || targets.size() != size)
    throw std::invalid_argument("fill_eval_rows: spans must hold count * seq_len ids");
  for (int64_t r = 0; r < count; ++r) {
    const int32_t* row = tokens.data() + (first_row + r) * (seq_len + 1);
    std::copy_n(row, seq_len, inputs.data() + r * seq_len);
    std::copy_n(row + 1, seq_len, targets.data() + r * seq_len);
  }
}

}  // namespace remat
