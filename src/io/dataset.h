// Training and evaluation data: files or the built-in corpus -> token ids ->
// (inputs, targets) batches.
//
// Text is tokenised with the job's tokenizer (io/tokenizer.h; the byte
// tokenizer by default), each document as BOS + its ids + EOS. A .npy file
// already holds token ids. Nothing is ever downloaded: the
// default corpus is the quotes of the Debian package `fortunes`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/config.h"

namespace remat {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

struct TokenDataset {
  std::vector<int32_t> tokens;
  // One line for the log: where the tokens came from and how many there are,
  // e.g. "fortunes (61 files in /usr/share/games/fortunes, 15,284 quotes): 2,652,171 tokens".
  std::string description;
  // Where each document starts in `tokens` (the built-in data, whose
  // held-out part begins at one); empty for a file's tokens.
  std::vector<int64_t> document_starts;
};

// The training tokens of a job: training.dataset_path if set, else the
// built-in dataset named by training.dataset ("fortunes"). Every id is
// < vocab_size. Throws InputError for an unknown dataset name, an unreadable
// or malformed file, an id >= vocab_size, or a tokenizer (model.tokenizer:
// "byte", a .model or a tokenizer.json file) that cannot be loaded or whose
// vocabulary is not vocab_size.
TokenDataset load_training_tokens(const JobConfig& cfg, int64_t vocab_size);

// One file, by extension: ".npy" token ids, ".jsonl" one JSON object with a
// string field "text" per line (blank lines skipped), anything else plain
// text (the whole file is one document), text tokenised with `tokenizer` as
// make_tokenizer takes it. Used for training.dataset_path and
// validation.dataset.
TokenDataset load_token_file(const std::string& path, const std::string& tokenizer,
                             int64_t vocab_size);

// The `fortunes` corpus: every data file directly in `dir` (not the .dat
// indexes nor the .u8 links), sorted by name, split into quotes at lines
// holding only "%"; each non-blank quote is one document.
TokenDataset load_fortunes(const std::string& dir, int64_t vocab_size,
                           const std::string& tokenizer = "byte");

// The built-in data's held-out part, for validation while training: the
// documents from the first document start at or after token n - n * fraction
// to the end (so no document is in both parts); `train` is everything before
// it and the only part a training run reads. Deterministic, and the same
// whatever ids the tokenizer gives (it may have no BOS). InputError when no
// document starts after the first token (nothing could be held out).
struct HeldOutSplit {
  std::vector<int32_t> train, held_out;
};
inline constexpr double kHeldOutFraction = 0.01;
HeldOutSplit split_held_out(const TokenDataset& data, double fraction);

// Training batches from a token stream. The stream is cut into windows of
// seq_len + 1 tokens with stride seq_len (window w starts at token w*seq_len,
// so consecutive windows share one token); only whole windows are used.
// Each batch is the next batch_size windows in order, wrapping around to the
// first window when the stream is exhausted. Deterministic: the k-th batch
// depends only on the tokens, batch_size, seq_len and k.
class BatchLoader {
 public:
  // Throws InputError naming `dataset_name` if there are fewer than
  // seq_len + 1 tokens; batch_size and seq_len must be > 0.
  BatchLoader(std::vector<int32_t> tokens, int64_t batch_size, int64_t seq_len,
              std::string dataset_name);

  // Fills row-major (batch_size, seq_len) inputs and targets, targets being
  // the inputs shifted by one token. Both spans hold batch_size * seq_len ids.
  void next(std::span<int32_t> inputs, std::span<int32_t> targets);

  int64_t batch_size() const { return batch_size_; }
  int64_t seq_len() const { return seq_len_; }
  // How many distinct windows there are before the loader wraps around.
  int64_t num_windows() const { return num_windows_; }
  // The window the next batch starts at, in [0, num_windows()); setting it
  // resumes a run (after k batches it is k * batch_size mod num_windows()).
  int64_t position() const { return position_; }
  void set_position(int64_t window);
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
  int64_t batch_size_;
  int64_t seq_len_;
  int64_t num_windows_;
  int64_t position_ = 0;
};

// Evaluation rows: non-overlapping windows of seq_len + 1 tokens, row r being
// tokens [r * (seq_len + 1), (r + 1) * (seq_len + 1)); the tail that does not
// fill a whole row is dropped. Returns the number of rows (may be 0).
int64_t count_eval_rows(int64_t num_tokens, int64_t seq_len);

// Fills row-major (count, seq_len) inputs and targets with rows
// first_row .. first_row + count - 1 (each must be < count_eval_rows).
void fill_eval_rows(std::span<const int32_t> tokens, int64_t seq_len, int64_t first_row,
                    int64_t count, std::span<int32_t> inputs, std::span<int32_t> targets);

}  // namespace remat
