// The dataset harnesses: load_token_file on a scratch file with the given
// extension, then what training and eval do with the tokens (batches and
// eval rows at a small seq_len taken from the input's first byte).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "io/dataset.h"

namespace remat::fuzz {

inline int fuzz_token_file(const std::string& name, const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t vocab_size = 258 + data[0] % 4;  // the byte tokenizer's minimum and a bit more
  const int64_t seq_len = 1 + data[0] % 16;
  const std::string path = write_scratch_file(name, data + 1, size - 1);
  expect_input_errors_only([&] {
    TokenDataset d = load_token_file(path, "byte", vocab_size);
    for (int32_t t : d.tokens) require(t >= 0 && t < vocab_size, "token ids are < vocab_size");
    const int64_t rows = count_eval_rows(static_cast<int64_t>(d.tokens.size()), seq_len);
    if (rows > 0) {
      std::vector<int32_t> in(seq_len), target(seq_len);
      fill_eval_rows(d.tokens, seq_len, rows - 1, 1, in, target);
    }
    const int64_t batch = 1 + data[0] % 3;
    BatchLoader loader(std::move(d.tokens), batch, seq_len, path);
    std::vector<int32_t> in(batch * seq_len), target(batch * seq_len);
    for (int i = 0; i < 3; ++i) loader.next(in, target);
  });
  return 0;
}

}  // namespace remat::fuzz
