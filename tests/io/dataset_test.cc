#include "io/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/npy.h"
#include "io/tokenizer.h"

namespace remat {
namespace {

namespace fs = std::filesystem;
constexpr int32_t B = ByteTokenizer::kBos, E = ByteTokenizer::kEos;

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

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("remat_dataset_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  fs::path dir_;
};

TEST(ByteTokenizer, EncodesBytesAndDecodes) {
  const ByteTokenizer tok(258);
  EXPECT_EQ(tok.encode("Hi\xC3\xA9"), (std::vector<int32_t>{72, 105, 0xC3, 0xA9}));
  std::vector<int32_t> doc;
  tok.append_document("ab", doc);
  EXPECT_EQ(doc, (std::vector<int32_t>{B, 97, 98, E}));
  EXPECT_EQ(tok.decode(doc), "ab");
  EXPECT_EQ(tok.decode(tok.encode("any text\n\xff")), "any text\n\xff");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{65, 300}), "A\xEF\xBF\xBD");
}

TEST(ByteTokenizer, NeedsRoomForBosAndEos) {
  const std::string e = error_of([] { ByteTokenizer tok(257); });
  EXPECT_NE(e.find("vocab_size >= 258"), std::string::npos) << e;
  EXPECT_NE(e.find("257"), std::string::npos) << e;
}

TEST_F(DatasetTest, PlainTextIsOneDocument) {
  const std::string p = write("a.txt", "hey");
  const TokenDataset d = load_token_file(p, "byte", 2048);
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{B, 'h', 'e', 'y', E}));
  EXPECT_NE(d.description.find(p), std::string::npos);
  EXPECT_NE(d.description.find("5 tokens"), std::string::npos) << d.description;
}

TEST_F(DatasetTest, JsonlDocumentsAndBlankLines) {
  const std::string p = write(
      "a.jsonl", "{\"text\": \"ab\", \"id\": 1}\n\n{\"text\": \"\\u00e9\"}\r\n{\"text\":\"\"}");
  const TokenDataset d = load_token_file(p, "byte", 258);
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{B, 'a', 'b', E, B, 0xC3, 0xA9, E, B, E}));
  EXPECT_NE(d.description.find("3 documents"), std::string::npos) << d.description;
}

TEST_F(DatasetTest, JsonlBadLinesNameFileAndLine) {
  struct Case {
    std::string content, expected;
  };
  const Case cases[] = {
      {"{\"text\": \"ok\"}\n{\"text\": \"unterminated\n", "line 2: invalid JSON"},
      {"{\"text\": \"ok\"}\n\n[1, 2]\n", "line 3: expected a JSON object with a string field"},
      {"{\"body\": \"x\"}\n", "line 1: expected a JSON object"},
      {"{\"text\": 5}\n", "line 1: expected a JSON object"},
      // nlohmann throws out_of_range, not parse_error, for a number beyond
      // double (found by tests/fuzz/fuzz_jsonl).
      {"{\"text\": \"x\", \"n\": 2.1e3600}\n", "line 1: invalid JSON"},
  };
  for (const auto& c : cases) {
    const std::string p = write("bad.jsonl", c.content);
    const std::string e = error_of([&] { load_token_file(p, "byte", 2048); });
    EXPECT_NE(e.find("'" + p + "'"), std::string::npos) << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << e;
    // Where the JSON broke, without the library's exception id.
    if (c.expected.ends_with("invalid JSON")) {
      EXPECT_TRUE(e.find("parse error at line 1, column") != std::string::npos ||
                  e.find("number overflow parsing '2.1e3600'") != std::string::npos)
          << e;
      EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;
    }
  }
}

TEST_F(DatasetTest, NpyTokensAreCheckedAgainstVocab) {
  const std::string p = (dir_ / "t.npy").string();
  write_npy_int32(p, std::vector<int32_t>{1, 2, 99, 3});
  EXPECT_EQ(load_token_file(p, "some/tokenizer.model", 100).tokens,
            (std::vector<int32_t>{1, 2, 99, 3}));
  const std::string e = error_of([&] { load_token_file(p, "byte", 99); });
  EXPECT_NE(e.find(p), std::string::npos) << e;
  EXPECT_NE(e.find("index 2"), std::string::npos) << e;
  EXPECT_NE(e.find("vocab_size = 99"), std::string::npos) << e;
}

TEST_F(DatasetTest, FileErrors) {
  std::string e = error_of([&] { load_token_file((dir_ / "none.txt").string(), "byte", 300); });
  EXPECT_NE(e.find("none.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;
  e = error_of([&] { load_token_file(dir_.string(), "byte", 300); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  const std::string p = write("a.txt", "x");
  e = error_of([&] { load_token_file(p, "byte", 100); });
  EXPECT_NE(e.find("vocab_size >= 258"), std::string::npos) << e;
  e = error_of([&] { load_token_file(p, "tok.model", 4096); });
  EXPECT_NE(e.find("model.tokenizer"), std::string::npos) << e;
}

TEST_F(DatasetTest, TrainingTokensFollowTheConfig) {
  JobConfig cfg;
  cfg.training.dataset_path = write("a.jsonl", "{\"text\": \"q\"}\n");
  EXPECT_EQ(load_training_tokens(cfg, 2048).tokens, (std::vector<int32_t>{B, 'q', E}));
  cfg.training.dataset_path = "";
  cfg.training.dataset = "c4";
  const std::string e = error_of([&] { load_training_tokens(cfg, 2048); });
  EXPECT_NE(e.find("training.dataset = \"c4\""), std::string::npos) << e;
  EXPECT_NE(e.find("known: fortunes"), std::string::npos) << e;
}

TEST_F(DatasetTest, FortuneFilesSplitAtPercentLines) {
  write("b", "second\n%\n");
  write("a", "one\nline two\n%\n  \n%\n100% sure\n");
  write("a.dat", "binary index");
  fs::create_symlink(dir_ / "a", dir_ / "a.u8");
  fs::create_directories(dir_ / "off");
  std::ofstream((dir_ / "off" / "rude").string()) << "not this\n";
  const TokenDataset d = load_fortunes(dir_.string(), 258);
  const ByteTokenizer tok(258);
  std::vector<int32_t> expected;
  for (const char* quote : {"one\nline two\n", "100% sure\n", "second\n"})
    tok.append_document(quote, expected);
  EXPECT_EQ(d.tokens, expected);
  EXPECT_NE(d.description.find("2 files"), std::string::npos) << d.description;
  EXPECT_NE(d.description.find("3 quotes"), std::string::npos) << d.description;
}

TEST_F(DatasetTest, MissingFortunesSaysWhichPackage) {
  const std::string e = error_of([&] { load_fortunes((dir_ / "gone").string(), 2048); });
  EXPECT_NE(e.find("`fortunes`"), std::string::npos) << e;
  EXPECT_NE(e.find("make run"), std::string::npos) << e;
}

TEST(Fortunes, DefaultDatasetIsRealText) {
  if (!fs::is_directory(kFortunesDir)) GTEST_SKIP() << "Debian package fortunes not installed";
  JobConfig cfg;  // dataset = "fortunes", no path
  const TokenDataset d = load_training_tokens(cfg, 2048);
  EXPECT_GT(d.tokens.size(), 100000u);
  EXPECT_LT(*std::max_element(d.tokens.begin(), d.tokens.end()), 258);
  EXPECT_GE(*std::min_element(d.tokens.begin(), d.tokens.end()), 0);
  EXPECT_EQ(d.tokens.front(), B);
  EXPECT_EQ(d.tokens.back(), E);
  EXPECT_NE(d.description.find("fortunes"), std::string::npos);
  // Loading twice gives the same stream: file order does not depend on the
  // directory listing.
  EXPECT_EQ(load_training_tokens(cfg, 2048).tokens, d.tokens);
}

TEST(HeldOut, CutsAtADocumentStartNearTheEnd) {
  // Four documents in 16 tokens; 40% is 6 tokens, so the held-out part
  // starts at the first document start at or after token 10.
  const TokenDataset d{{B, 1, E, B, 2, 2, E, B, 3, E, B, 4, 4, 4, 4, E}, "", {0, 3, 7, 10}};
  const std::vector<int32_t>& t = d.tokens;
  const HeldOutSplit s = split_held_out(d, 0.4);
  EXPECT_EQ(s.train, std::vector<int32_t>(t.begin(), t.begin() + 10));
  EXPECT_EQ(s.held_out, std::vector<int32_t>(t.begin() + 10, t.end()));
  // Deterministic, and the parts are disjoint and cover the stream in order.
  EXPECT_EQ(split_held_out(d, 0.4).held_out, s.held_out);
  // The search starts at token 1 at the latest: the whole stream is never held out.
  EXPECT_EQ(split_held_out(d, 1.0).train, std::vector<int32_t>(t.begin(), t.begin() + 3));
  EXPECT_NE(error_of([&] {
              split_held_out(TokenDataset{{B, 1, 2, E}, "", {0}}, 0.5);
            }).find("validation.dataset"),
            std::string::npos);
}

// A tokenizer without BOS, or one whose id 256 is a word piece: the cut is
// where a document starts, whatever ids are there (it was the first 256).
TEST(HeldOut, CutsWhereADocumentStartsWhateverItsIds) {
  const TokenDataset d{{5, 256, 6, 7, 256, 8, 9, 9}, "", {0, 3, 5}};
  const HeldOutSplit s = split_held_out(d, 0.5);
  EXPECT_EQ(s.held_out, std::vector<int32_t>({8, 9, 9}));
  EXPECT_EQ(s.train, std::vector<int32_t>({5, 256, 6, 7, 256}));
}

TEST(HeldOut, FortunesTailIsNeverTrainedOn) {
  if (!fs::is_directory(kFortunesDir)) GTEST_SKIP() << "Debian package fortunes not installed";
  JobConfig cfg;
  cfg.validation.enabled = true;
  const TokenDataset data = load_training_tokens(cfg, 2048);
  const std::vector<int32_t>& all = data.tokens;
  const HeldOutSplit s = split_held_out(data, kHeldOutFraction);
  EXPECT_EQ(s.train.size() + s.held_out.size(), all.size());
  EXPECT_EQ(s.held_out.front(), B);
  // About 1%: no more, less only by the part of the quote the cut skips.
  EXPECT_LE(s.held_out.size(), all.size() / 100);
  EXPECT_GT(s.held_out.size(), all.size() / 110);
  // The loader sees only the training part: every window it serves lies in it.
  BatchLoader loader(s.train, 1, 64, "fortunes");
  EXPECT_EQ(loader.tokens().size(), s.train.size());
  EXPECT_LE((loader.num_windows() - 1) * 64 + 65, static_cast<int64_t>(s.train.size()));
}

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

TEST(BatchLoader, WindowsWithStrideSeqLenAndWrapAround) {
  // 11 tokens, seq_len 3: windows [0..3], [3..6], [6..9]; token 10 is unused.
  BatchLoader loader(iota_tokens(11), 2, 3, "test");
  EXPECT_EQ(loader.num_windows(), 3);
  std::vector<int32_t> in(6), tg(6);
  loader.next(in, tg);
  EXPECT_EQ(in, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(tg, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  loader.next(in, tg);  // window 2, then wraps to window 0
  EXPECT_EQ(in, (std::vector<int32_t>{6, 7, 8, 0, 1, 2}));
  EXPECT_EQ(tg, (std::vector<int32_t>{7, 8, 9, 1, 2, 3}));
  EXPECT_EQ(loader.position(), 1);
  loader.next(in, tg);
  EXPECT_EQ(in, (std::vector<int32_t>{3, 4, 5, 6, 7, 8}));
}

TEST(BatchLoader, DeterministicAndResumable) {
  BatchLoader a(iota_tokens(1000), 4, 16, "a"), b(iota_tokens(1000), 4, 16, "b");
  std::vector<int32_t> ia(64), ta(64), ib(64), tb(64);
  for (int step = 0; step < 5; ++step) a.next(ia, ta);
  b.set_position(5 * 4 % b.num_windows());
  a.next(ia, ta);
  b.next(ib, tb);
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(ta, tb);
}

TEST(BatchLoader, ExactlyOneWindow) {
  BatchLoader loader(iota_tokens(5), 3, 4, "tiny");
  std::vector<int32_t> in(12), tg(12);
  loader.next(in, tg);
  EXPECT_EQ(in, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(tg, (std::vector<int32_t>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(BatchLoader, TooFewTokensNamesDatasetAndSizes) {
  const std::string e = error_of([] { BatchLoader loader(iota_tokens(4), 1, 4, "'x.txt'"); });
  EXPECT_NE(e.find("'x.txt' has 4 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("seq_len + 1 = 5"), std::string::npos) << e;
}

TEST(EvalRows, RowsOfSeqLenPlusOneDropTheTail) {
  const std::vector<int32_t> tokens = iota_tokens(11);
  EXPECT_EQ(count_eval_rows(11, 4), 2);  // [0..4], [5..9]; token 10 dropped
  EXPECT_EQ(count_eval_rows(4, 4), 0);
  std::vector<int32_t> in(8), tg(8);
  fill_eval_rows(tokens, 4, 0, 2, in, tg);
  EXPECT_EQ(in, (std::vector<int32_t>{0, 1, 2, 3, 5, 6, 7, 8}));
  EXPECT_EQ(tg, (std::vector<int32_t>{1, 2, 3, 4, 6, 7, 8, 9}));
  std::vector<int32_t> in1(4), tg1(4);
  fill_eval_rows(tokens, 4, 1, 1, in1, tg1);
  EXPECT_EQ(in1, (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_THROW(fill_eval_rows(tokens, 4, 2, 1, in1, tg1), std::out_of_range);
}

}  // namespace
}  // namespace remat
