// `remat tokenizer <train|encode> ...`: tokenizers without a job config.
//   train  --input FILE --vocab_size N --output FILE.model [--model_type bpe|unigram]
//          (SentencePiece)
//   encode --model FILE.model|tokenizer.json --input FILE: one line of ids per
//          input line, the hook the oracle tests (python3-sentencepiece, and
//          tests/io/test_hf_tokenizer.py's own byte-level BPE) compare.
#pragma once

#include <string>
#include <vector>

namespace remat {

// `args` follows "tokenizer". Returns the exit status; InputError (exit 2)
// for a missing or unknown subcommand or flag, or a bad value or file.
int run_tokenizer_command(const std::vector<std::string>& args);

}  // namespace remat
