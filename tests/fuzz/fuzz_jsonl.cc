// Fuzzes the JSONL dataset reader: one JSON object with a string field
// "text" per line, tokenised with the byte tokenizer. The first input byte
// picks the vocabulary size and seq_len (fuzz_dataset.h).
#include "fuzz_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return remat::fuzz::fuzz_token_file("data.jsonl", data, size);
}
