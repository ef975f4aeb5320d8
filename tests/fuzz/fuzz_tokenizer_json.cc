// Fuzzes the Hugging Face tokenizer.json reader (HfBpeTokenizer): the JSON,
// the BPE model (vocabulary spelled in GPT-2's byte alphabet, merges), the
// added tokens and the pre-tokenizer regexes compiled by PCRE2. A file that
// loads must keep the tokenizer's promises on a fixed text that mixes
// scripts, whitespace and invalid UTF-8: every id < vocab_size, and decode
// gives the text back (it holds no '<', so no BOS or EOS token text).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "io/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string kText =
      "Hello, world! I'LL 1234567 caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x99\x82\r\n"
      "\t  x\xFF\xC3 y\xE2\x82 \xED\xA0\x80 end  ";
  const std::string path = remat::fuzz::write_scratch_file("tokenizer.json", data, size);
  remat::fuzz::expect_input_errors_only([&] {
    const remat::HfBpeTokenizer tokenizer(path, "model.tokenizer_path");
    const std::vector<int32_t> ids = tokenizer.encode(kText);
    for (int32_t id : ids)
      remat::fuzz::require(id >= 0 && id < tokenizer.vocab_size(), "ids are < vocab_size");
    remat::fuzz::require(tokenizer.decode(ids) == kText, "decode(encode(x)) == x");
  });
  return 0;
}
