// Fuzzes the plain-text dataset reader (the whole file is one document,
// byte-tokenised). The first input byte picks the vocabulary size and
// seq_len (fuzz_dataset.h).
#include "fuzz_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return remat::fuzz::fuzz_token_file("data.txt", data, size);
}
