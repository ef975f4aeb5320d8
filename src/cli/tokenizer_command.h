// `remat tokenizer <train|encode> ...`: SentencePiece tokenizers without a
// job config.
//   train  --input FILE --vocab_size N --output FILE.model [--model_type bpe|unigram]
//   encode --model FILE.model --input FILE: one line of ids per input line,
//          the hook the python3-sentencepiece oracle test compares.
#pragma once

#include <string>
#include <vector>

namespace remat {

// `args` follows "tokenizer". Returns the exit status; InputError (exit 2)
// for a missing or unknown subcommand or flag, or a bad value or file.
int run_tokenizer_command(const std::vector<std::string>& args);

}  // namespace remat
