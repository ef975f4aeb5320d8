#include "io/sentencepiece.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/dataset.h"
#include "io/files.h"
#include "io/tokenizer.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

// One small BPE model, trained once for the whole suite.
class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("remat_sentencepiece_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream text(dir_ / "train.txt");
    for (int i = 0; i < 200; ++i)
      text << "the quick brown fox " << i << " jumps over the lazy dog\n"
           << "a stitch in time saves nine, said the " << i % 7 << "th tailor\n";
    text.close();
    SentencePieceTrainOptions o;
    o.input = (dir_ / "train.txt").string();
    o.vocab_size = 120;
    o.output = model_path();
    train_sentencepiece(o);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model_path() { return (dir_ / "tok.model").string(); }

  static fs::path dir_;
};
fs::path SentencePieceTest::dir_;

TEST_F(SentencePieceTest, EncodesDecodesAndWrapsDocuments) {
  const SentencePieceTokenizer tok(model_path(), "model.tokenizer_path");
  EXPECT_EQ(tok.vocab_size(), 120);
  const std::vector<int32_t> ids = tok.encode("the lazy fox");
  ASSERT_FALSE(ids.empty());
  for (int32_t id : ids) EXPECT_LT(id, 120);
  EXPECT_EQ(tok.decode(ids), "the lazy fox");
  std::vector<int32_t> doc;
  tok.append_document("the lazy fox", doc);
  ASSERT_EQ(doc.size(), ids.size() + 2);
  EXPECT_EQ(doc.front(), 1);  // SentencePiece's default bos_id
  EXPECT_EQ(doc.back(), 2);   // and eos_id
  EXPECT_EQ(std::vector<int32_t>(doc.begin() + 1, doc.end() - 1), ids);
}

// A long text goes to the library in pieces cut at single spaces between
// ASCII letters or digits (its memory is about 190 bytes per byte of one
// call); the ids are those of one call over the whole text.
TEST_F(SentencePieceTest, LongTextsEncodeInPiecesToTheSameIds) {
  const SentencePieceTokenizer tok(model_path(), "model.tokenizer_path");
  ASSERT_TRUE(tok.cuts_long_texts());  // a BPE model (unigram: the next test)
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "the quick brown fox " + std::to_string(i) + " jumps  over the\tlazy dog, said " +
            (i % 3 ? "the tailor" : "élan vital") + ".\n" + (i % 5 ? "" : "\n  indented line ");
  const std::vector<int32_t> whole = tok.encode_in_pieces(text, text.size());
  ASSERT_GT(whole.size(), 1000u);
  for (size_t piece : {size_t{7}, size_t{100}, size_t{1000}, size_t{4096}}) {
    EXPECT_EQ(tok.encode_in_pieces(text, piece), whole) << "pieces of " << piece << " bytes";
  }
  // encode() cuts at kPieceBytes; a text shorter than that is one call.
  EXPECT_EQ(tok.encode(text), whole);
}

// A unigram model's best path depends on score sums from the text's start
// (ties break by their rounding), so it is never cut: python3-sentencepiece
// segmented "!!!!!" differently in a piece than in the whole.
TEST_F(SentencePieceTest, UnigramModelsAreNeverCut) {
  SentencePieceTrainOptions o;
  o.input = (dir_ / "train.txt").string();
  o.vocab_size = 60;  // this little text holds at most 79 unigram pieces
  o.model_type = "unigram";
  o.output = (dir_ / "unigram.model").string();
  train_sentencepiece(o);
  EXPECT_FALSE(SentencePieceTokenizer(o.output, "model.tokenizer_path").cuts_long_texts());
}

TEST_F(SentencePieceTest, VocabSizeFollowsTheTokenizer) {
  JobConfig c;
  c.model.tokenizer_path = model_path();
  resolve_tokenizer(c);
  EXPECT_EQ(c.model.vocab_size, 120);
  EXPECT_EQ(c.model.tokenizer, model_path());
  resolve_tokenizer(c);  // idempotent: the size now set is the tokenizer's
  EXPECT_EQ(c.model.vocab_size, 120);

  JobConfig mismatch;
  mismatch.model.tokenizer_path = model_path();
  mismatch.model.vocab_size = 2048;
  std::string e = error_of([&] { resolve_tokenizer(mismatch); });
  EXPECT_NE(e.find("model.vocab_size = 2048 differs from the 120 tokens"), std::string::npos) << e;

  JobConfig two;
  two.model.tokenizer_path = model_path();
  two.model.tokenizer = "other.model";
  e = error_of([&] { resolve_tokenizer(two); });
  EXPECT_NE(e.find("set only one"), std::string::npos) << e;

  JobConfig byte;
  resolve_tokenizer(byte);
  EXPECT_EQ(byte.model.vocab_size, 0);  // the flavor's default stays
}

TEST_F(SentencePieceTest, TextDatasetsUseTheTokenizer) {
  const std::string p = (dir_ / "data.txt").string();
  std::ofstream(p) << "the lazy fox";
  const SentencePieceTokenizer tok(model_path(), "model.tokenizer");
  std::vector<int32_t> expected;
  tok.append_document("the lazy fox", expected);
  EXPECT_EQ(load_token_file(p, model_path(), 120).tokens, expected);
  const std::string e = error_of([&] { load_token_file(p, model_path(), 2048); });
  EXPECT_NE(e.find("has 120 tokens, but model.vocab_size = 2048"), std::string::npos) << e;
}

TEST_F(SentencePieceTest, BadFilesAndOptions) {
  std::string e = error_of([&] { SentencePieceTokenizer((dir_ / "train.txt").string(), "k"); });
  EXPECT_NE(e.find("not a SentencePiece .model file"), std::string::npos) << e;
  SentencePieceTrainOptions o;
  o.input = (dir_ / "train.txt").string();
  o.output = (dir_ / "big.model").string();
  o.vocab_size = 100000;
  e = error_of([&] { train_sentencepiece(o); });
  EXPECT_NE(e.find("Vocabulary size too high"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(o.output));
  EXPECT_FALSE(fs::exists(o.output + ".tmp"));
  o.vocab_size = 100;
  o.model_type = "char-ish";
  e = error_of([&] { train_sentencepiece(o); });
  EXPECT_NE(e.find("expected \"bpe\" or \"unigram\""), std::string::npos) << e;
  o.model_type = "unigram";
  o.input = (dir_ / "none.txt").string();
  e = error_of([&] { train_sentencepiece(o); });
  EXPECT_NE(e.find("none.txt"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(o.output));
}

// Lines over SentencePiece's max_sentence_length (4192 bytes) are cut, not
// skipped: a text of three 160 KB paragraphs trained on nothing before
// ("refused without a reason"); now it trains, and so does one unbroken
// word (cut at UTF-8 character boundaries).
TEST_F(SentencePieceTest, LongLinesTrainInPieces) {
  std::ofstream text(dir_ / "long.txt");
  for (int line = 0; line < 3; ++line) {
    for (int w = 0; w < 20000; ++w) text << "word" << (w * 7 + line) % 97 << (w % 5 ? " " : "é ");
    text << "\n";
  }
  text << std::string(10000, 'x') << "\u00e9" << std::string(10000, 'y') << "\n";
  text.close();
  SentencePieceTrainOptions o;
  o.input = (dir_ / "long.txt").string();
  o.vocab_size = 120;
  o.output = (dir_ / "long.model").string();
  train_sentencepiece(o);
  SentencePieceTokenizer tok(o.output, "k");
  EXPECT_EQ(tok.vocab_size(), 120);
}

// The model's normalizer map with its trie overwritten (0xFF bytes, its
// size word kept): libsentencepiece walked it out of bounds (a segfault);
// it is refused, naming the map, and the intact model still loads.
TEST_F(SentencePieceTest, DamagedNormalizerMapIsRefused) {
  std::ifstream in(model_path(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // NormalizerSpec: name (field 1) "nmt_nfkc", then precompiled_charsmap
  // (field 2: tag 0x12, a varint length), whose first 4 bytes size the trie.
  size_t at = bytes.find("nmt_nfkc");
  ASSERT_NE(at, std::string::npos);
  at += 8;
  ASSERT_EQ(static_cast<uint8_t>(bytes[at++]), 0x12);
  while (static_cast<uint8_t>(bytes[at++]) & 0x80) {
  }
  uint32_t trie = 0;
  for (int i = 3; i >= 0; --i) trie = trie << 8 | static_cast<uint8_t>(bytes[at + i]);
  ASSERT_GT(trie, 0u);
  ASSERT_LT(at + 4 + trie, bytes.size());
  std::string damaged = bytes;
  std::fill(damaged.begin() + static_cast<std::ptrdiff_t>(at + 4),
            damaged.begin() + static_cast<std::ptrdiff_t>(at + 4 + trie), '\xff');
  const std::string path = (dir_ / "damaged.model").string();
  std::ofstream(path, std::ios::binary) << damaged;
  const std::string e = error_of([&] { SentencePieceTokenizer(path, "model.tokenizer_path"); });
  EXPECT_NE(e.find("precompiled character map is damaged"), std::string::npos) << e;
  EXPECT_NE(e.find("damaged.model"), std::string::npos) << e;
  SentencePieceTokenizer intact(model_path(), "k");
  EXPECT_GT(intact.vocab_size(), 0);
}

// --output naming the --input (however spelled) would replace the text the
// tokenizer was trained on with the model: refused, the text left as it was.
TEST_F(SentencePieceTest, OutputNeverReplacesTheInput) {
  const ProtectedInputs scope;  // as the CLI opens around a command
  const std::string input = (dir_ / "train.txt").string();
  std::ifstream in(input, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SentencePieceTrainOptions o;
  o.input = input;
  o.vocab_size = 100;
  fs::create_hard_link(input, dir_ / "same.txt");
  for (const std::string& output :
       {input, (dir_ / "." / "train.txt").string(), (dir_ / "same.txt").string()}) {
    o.output = output;
    const std::string e = error_of([&] { train_sentencepiece(o); });
    EXPECT_NE(e.find("is the tokenizer train --input this run reads"), std::string::npos)
        << output << ": " << e;
    std::ifstream after_in(input, std::ios::binary);
    const std::string after((std::istreambuf_iterator<char>(after_in)),
                            std::istreambuf_iterator<char>());
    EXPECT_EQ(after, before) << output;
  }
}

}  // namespace
}  // namespace remat
