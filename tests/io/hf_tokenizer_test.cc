#include "io/hf_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/tokenizer.h"

namespace remat {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Llama 3's pre-tokenizer split, as its tokenizer.json has it.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte-to-unicode spelling of `bytes`, written out here again so
// the test does not take the tokenizer's own table on trust.
std::string spell(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    int code = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
      code = 256;
      for (int c = 0; c < b; ++c)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) ++code;
    }
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }
  return out;
}

// A Llama-3-shaped tokenizer.json: the 256 bytes as ids 0..255, a token per
// merge from 256 on, then BOS, EOS and one more special token.
json llama3_like(const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object(), merge_list = json::array();
  for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, static_cast<char>(b)))] = b;
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[spell(a + b)] = next++;
    merge_list.push_back(spell(a) + " " + spell(b));
  }
  json added = json::array();
  for (const char* special : {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"})
    added.push_back({{"id", next++}, {"content", special}, {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", kLlama3Pattern}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"ignore_merges", true}, {"vocab", vocab}, {"merges", merge_list}}}};
}

const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"},   {"l", "l"},    {"he", "ll"},   {"hell", "o"},    {" ", "w"},          {"o", "r"},
    {" w", "or"}, {" wor", "l"}, {" worl", "d"}, {"\xC3", "\xA9"}, {"1", "2"},          {"12", "3"},
    {" ", " "},   {"a", "a"},    {"aa", "aa"},   {"\xE2", "\x82"}, {"\xE2\x82", "\xAC"}};

class HfTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("remat_hf_tokenizer_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  HfBpeTokenizer load(const json& file) {
    return HfBpeTokenizer(write("tokenizer.json", file.dump()), "model.tokenizer_path");
  }
  std::string error_of(const std::string& text) {
    try {
      HfBpeTokenizer(write("bad.json", text), "model.tokenizer_path");
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected an InputError for " << text.substr(0, 200);
    return "";
  }

  fs::path dir_;
};

// Ids of kMerges' tokens: 256 + index.
int32_t merged(const std::string& a, const std::string& b) {
  for (size_t i = 0; i < kMerges.size(); ++i)
    if (kMerges[i] == std::pair(a, b)) return static_cast<int32_t>(256 + i);
  ADD_FAILURE() << "no merge " << a << " + " << b;
  return -1;
}

TEST_F(HfTokenizerTest, MergesByRankWithinPreTokens) {
  const HfBpeTokenizer tok = load(llama3_like(kMerges));
  EXPECT_EQ(tok.vocab_size(), 256 + static_cast<int64_t>(kMerges.size()) + 3);
  EXPECT_EQ(tok.encode("hello world"),
            (std::vector<int32_t>{merged("hell", "o"), merged(" worl", "d")}));
  // "hello" and " world" are separate pre-tokens: no merge crosses them, and
  // a pre-token that is no token falls back to the merges it has.
  EXPECT_EQ(tok.encode("helloworld"),
            (std::vector<int32_t>{merged("hell", "o"), 'w', merged("o", "r"), 'l', 'd'}));
  // Digits split in threes (\p{N}{1,3}): "312" + "34".
  EXPECT_EQ(tok.encode("31234"), (std::vector<int32_t>{'3', merged("1", "2"), '3', '4'}));
  // "é" (a letter) and "€" (a symbol) are pre-tokens of their own.
  EXPECT_EQ(tok.encode("\xC3\xA9\xE2\x82\xAC"),
            (std::vector<int32_t>{merged("\xC3", "\xA9"), merged("\xE2\x82", "\xAC")}));
  // Lowest rank first, leftmost among equals: "aaaaa" = (aa aa) + a.
  EXPECT_EQ(tok.encode("aaaaa"), (std::vector<int32_t>{merged("aa", "aa"), 'a'}));
  // Spaces before a word: "\s+(?!\S)" leaves the last one to the word.
  EXPECT_EQ(tok.encode("   world"), (std::vector<int32_t>{merged(" ", " "), merged(" worl", "d")}));
  EXPECT_EQ(tok.decode(tok.encode("hello world")), "hello world");
}

TEST_F(HfTokenizerTest, SpecialTokensAreMatchedFirstAndWrapDocuments) {
  const HfBpeTokenizer tok = load(llama3_like(kMerges));
  const int32_t bos = 256 + static_cast<int32_t>(kMerges.size());
  EXPECT_EQ(tok.bos_id(), bos);
  EXPECT_EQ(tok.eos_id(), bos + 1);
  EXPECT_EQ(tok.encode("he<|eot_id|>llo"),
            (std::vector<int32_t>{merged("h", "e"), bos + 2, merged("l", "l"), 'o'}));
  EXPECT_EQ(tok.encode("<|end_of_text|><|eot"),
            (std::vector<int32_t>{bos + 1, '<', '|', 'e', 'o', 't'}));
  std::vector<int32_t> doc;
  tok.append_document("hello", doc);
  EXPECT_EQ(doc, (std::vector<int32_t>{bos, merged("hell", "o"), bos + 1}));
  EXPECT_EQ(tok.decode(doc), "hello");  // BOS and EOS are dropped
  EXPECT_EQ(tok.decode(std::vector<int32_t>{bos + 2, -1, 1 << 20}),
            "<|eot_id|>\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_F(HfTokenizerTest, IgnoreMergesTakesWholeTokens) {
  json file = llama3_like({{"a", "b"}});
  file["model"]["vocab"]["abc"] = 300;  // reachable by no merge
  EXPECT_EQ(load(file).encode("abc"), std::vector<int32_t>{300});
  file["model"]["ignore_merges"] = false;
  EXPECT_EQ(load(file).encode("abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_EQ(load(file).vocab_size(), 301);  // ids 260..299 name nothing
  EXPECT_EQ(load(file).decode(std::vector<int32_t>{280}), "\xEF\xBF\xBD");
}

// decode(encode(x)) == x for any bytes: random strings mixing invalid UTF-8,
// multi-byte characters, whitespace, digits and pieces of special tokens.
TEST_F(HfTokenizerTest, DecodeInvertsEncodeOnArbitraryBytes) {
  json empty_matches = llama3_like(kMerges);  // a split that also matches ""
  empty_matches["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\s*|\p{L}+)";
  const std::vector<std::string> atoms = {"a",
                                          "aa",
                                          "hello",
                                          " ",
                                          "\t",
                                          "\r\n",
                                          "\n\n",
                                          "123456",
                                          "'LL",
                                          "'s",
                                          "\xC3\xA9",
                                          "\xE2\x82\xAC",
                                          "\xF0\x9F\x99\x82",
                                          "\xC3",
                                          "\x82",
                                          "\xFF",
                                          "\xED\xA0\x80",
                                          "<|",
                                          "|>",
                                          "<|eot_id|>",
                                          "\xE3\x80\x80",
                                          "!?",
                                          std::string(1, '\0')};
  for (const json& file : {llama3_like(kMerges), empty_matches}) {
    const HfBpeTokenizer tok = load(file);
    std::mt19937 rng(13);
    for (int trial = 0; trial < 2000; ++trial) {
      std::string text;
      const int parts = static_cast<int>(rng() % 12);
      for (int i = 0; i < parts; ++i) {
        if (rng() % 3 == 0)
          text += static_cast<char>(rng() % 256);
        else
          text += atoms[rng() % atoms.size()];
      }
      const std::vector<int32_t> ids = tok.encode(text);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
      ASSERT_EQ(tok.decode(ids), text) << "trial " << trial;
    }
  }
}

// Without a pre-tokenizer the whole text is one pre-token: merging stays
// O(n log n), so a long one is no problem.
TEST_F(HfTokenizerTest, LongPreTokenMergesFast) {
  json file = llama3_like(kMerges);
  file["pre_tokenizer"] = nullptr;
  const HfBpeTokenizer tok = load(file);
  const std::string text(1 << 20, 'a');
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(ids, std::vector<int32_t>((1 << 20) / 4, merged("aa", "aa")));
}

TEST_F(HfTokenizerTest, ByteLevelUseRegexSplitsAsGpt2) {
  json file = llama3_like(kMerges);
  file["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  // GPT-2's split keeps a number whole: "31234" is one pre-token.
  EXPECT_EQ(load(file).encode("31234"), (std::vector<int32_t>{'3', merged("12", "3"), '4'}));
  EXPECT_EQ(load(file).encode("hello world"),
            (std::vector<int32_t>{merged("hell", "o"), merged(" worl", "d")}));
}

TEST_F(HfTokenizerTest, VocabSizeFollowsTheTokenizer) {
  const std::string path = write("tok.json", llama3_like(kMerges).dump());
  JobConfig c;
  c.model.tokenizer_path = path;
  resolve_tokenizer(c);
  EXPECT_EQ(c.model.vocab_size, 256 + static_cast<int64_t>(kMerges.size()) + 3);
  EXPECT_EQ(make_tokenizer(c.model.tokenizer, c.model.vocab_size)->vocab_size(),
            c.model.vocab_size);
  JobConfig mismatch;
  mismatch.model.tokenizer_path = path;
  mismatch.model.vocab_size = 2048;
  try {
    resolve_tokenizer(mismatch);
    ADD_FAILURE() << "a vocab_size mismatch must be an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.vocab_size = 2048 differs"), std::string::npos);
  }
}

TEST_F(HfTokenizerTest, MalformedFilesNameWhatIsWrong) {
  const json good = llama3_like(kMerges);
  auto with = [&](const json::json_pointer& at, const json& value) {
    json file = good;
    file[at] = value;
    return file.dump();
  };
  json no_byte = good;
  no_byte["model"]["vocab"].erase(spell("\x07"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"model\": ", "invalid JSON"},
      {"[1, 2]", "expected a JSON object at the top"},
      {"{}", "the file is missing its \"model\" field"},
      {with(json::json_pointer("/model/type"), "WordPiece"), "model.type = \"WordPiece\""},
      {with(json::json_pointer("/model/vocab"), json::array()), "model.vocab: expected an object"},
      {with(json::json_pointer("/model/vocab/\xE2\x96\x81the"), 9),
       "outside GPT-2's byte-to-unicode"},
      {with(json::json_pointer("/model/vocab/hx"), -4), "model.vocab[\"hx\"] = -4"},
      {with(json::json_pointer("/model/vocab/hx"), 7), "id 7 is given to two tokens"},
      {no_byte.dump(), "no token for the byte 7"},
      {with(json::json_pointer("/model/merges/0"), "h e x"), "model.merges[0] = \"h e x\""},
      {with(json::json_pointer("/model/merges/1"), "q z"), "\"qz\" must all be tokens"},
      {with(json::json_pointer("/model/byte_fallback"), true), "model.byte_fallback = true"},
      {with(json::json_pointer("/normalizer"), {{"type", "NFC"}}), "normalizer = "},
      {with(json::json_pointer("/added_tokens/0/id"), "x"), "added_tokens[0].id = \"x\""},
      {with(json::json_pointer("/added_tokens/1/id"), 104), "id 104 is already the token \"h\""},
      {with(json::json_pointer("/pre_tokenizer/type"), "Whitespace"),
       "pre_tokenizer.type = \"Whitespace\": expected Split, ByteLevel or Sequence"},
      {with(json::json_pointer("/pre_tokenizer/pretokenizers/0/pattern/Regex"), "(\\p{L}"),
       "pre_tokenizer.pretokenizers[0].pattern: the regex \"(\\p{L}\" does not compile"},
      {with(json::json_pointer("/pre_tokenizer/pretokenizers/0/behavior"), "Removed"),
       "behavior = \"Removed\": expected \"Isolated\""},
      {with(json::json_pointer("/pre_tokenizer/pretokenizers/1/add_prefix_space"), true),
       "add_prefix_space = true"},
  };
  for (const auto& [text, message] : cases) {
    const std::string error = error_of(text);
    EXPECT_NE(error.find("model.tokenizer_path = \""), std::string::npos) << error;
    EXPECT_NE(error.find(message), std::string::npos)
        << "expected '" << message << "' in: " << error;
  }
  EXPECT_NE(error_of("").find("invalid JSON"), std::string::npos);
  try {
    HfBpeTokenizer((dir_ / "missing.json").string(), "--model");
    ADD_FAILURE() << "a missing file must be an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace remat
