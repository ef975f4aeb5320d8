// The sharded checkpoint index (io/shard_index.h): what to_json() writes
// parses back to the same index, and an index that contradicts itself is an
// InputError naming the file and what was expected.
#include "io/shard_index.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "io/json_error.h"

namespace remat {
namespace {

ShardIndex example() {
  ShardIndex index;
  index.step = 4;
  index.ranks = 2;
  index.with_optimizer = true;
  index.run = {{"training.steps", "8"}};
  index.units = {
      {-1, 136, 68, {{"tok_embeddings.weight", {16, 8}, 0, 0}, {"norm.weight", {8}, 128, 2}}},
      {0, 64, 32, {{"layers.0.attention.wq.weight", {8, 8}, 0, 1}}}};
  index.files = {"shard-0-of-2.safetensors", "shard-1-of-2.safetensors"};
  index.file_bytes = {1200, 1192};
  return index;
}

// What parsing `text` as an index says: its InputError, or "accepted".
std::string parse_error_of(const std::string& text) {
  try {
    ShardIndex::parse(text, "index.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ShardIndex, RoundTrips) {
  const std::string text = example().to_json();
  const ShardIndex back = ShardIndex::parse(text, "index.json");
  EXPECT_EQ(back.to_json(), text);
  EXPECT_EQ(back.units[0].params[1].fqn, "norm.weight");
  EXPECT_EQ(back.units[0].params[1].offset, 128);
  EXPECT_EQ(back.units[0].params[1].id, 2);
  EXPECT_EQ(back.file_bytes[1], 1192);
  EXPECT_EQ(back.run.at("training.steps"), "8");
}

void expect_rejected(const std::function<void(ShardIndex&)>& damage, const std::string& part) {
  ShardIndex index = example();
  damage(index);
  try {
    ShardIndex::parse(index.to_json(), "dir/index.json");
    ADD_FAILURE() << "accepted; expected an error naming " << part;
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("dir/index.json"), std::string::npos) << message;
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

TEST(ShardIndex, RejectsAnIndexThatContradictsItself) {
  expect_rejected([](ShardIndex& i) { i.units[1].chunk = 33; },
                  "expected ceil(numel 64 / ranks 2)");
  expect_rejected([](ShardIndex& i) { i.units[0].params[1].offset = 127; }, "expected 128");
  expect_rejected(
      [](ShardIndex& i) {
        i.units[0].numel = 137;
        i.units[0].chunk = 69;
      },
      "its parameters hold 136");
  expect_rejected([](ShardIndex& i) { i.units[1].params[0].fqn = "norm.weight"; }, "twice");
  expect_rejected([](ShardIndex& i) { i.units[1].params[0].id = 2; }, "once");
  // 2^32 x 2^32 wrapped to 0 elements (UBSan: signed overflow) and passed.
  expect_rejected(
      [](ShardIndex& i) {
        i.units[1].params[0].shape = {int64_t{1} << 32, int64_t{1} << 32};
      },
      "has too many elements");
  expect_rejected([](ShardIndex& i) { i.files[1] = "../shard-1-of-2.safetensors"; },
                  "a file name in the checkpoint's folder");
  expect_rejected([](ShardIndex& i) { i.ranks = 3; }, "expected ceil");
  expect_rejected(
      [](ShardIndex& i) {
        i.files.pop_back();
        i.file_bytes.pop_back();
      },
      "one per rank");
}

TEST(ShardIndex, RejectsOtherFilesAndVersions) {
  EXPECT_NE(parse_error_of("not json").find("is not a JSON object"), std::string::npos);
  std::string text = example().to_json();
  EXPECT_NE(
      parse_error_of(text.replace(text.find("\"version\":1"), 11, "\"version\":2")).find("version"),
      std::string::npos);
  EXPECT_NE(parse_error_of("{\"format\": \"remat\"}").find("expected \"remat-sharded-checkpoint\""),
            std::string::npos);
}

// nlohmann ends its input at a NUL: an index followed by a NUL and
// anything at all parsed as the index alone.
TEST(ShardIndex, RejectsANulByte) {
  const std::string text = example().to_json();
  EXPECT_NO_THROW(ShardIndex::parse(text, "index.json"));
  EXPECT_NE(parse_error_of(text + std::string(1, '\0') + "garbage").find("a NUL byte at offset"),
            std::string::npos);
  EXPECT_EQ(json_text_problem(text), "");
}

// A deep index is refused before parsing (printing its format back once
// overflowed the stack), at exactly the documented depth.
TEST(ShardIndex, RejectsJsonNestedTooDeep) {
  const auto nested = [](int depth) {
    return "{\"format\": " + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  EXPECT_NE(parse_error_of(nested(200000)).find("nested more than 512 deep"), std::string::npos);
  EXPECT_NE(parse_error_of(nested(kMaxJsonDepth + 1)).find("nested more than 512 deep"),
            std::string::npos);
  // At the limit it parses, and the (nested) format is quoted by its size.
  EXPECT_NE(parse_error_of(nested(kMaxJsonDepth)).find("has format an array of 1 elements"),
            std::string::npos)
      << parse_error_of(nested(kMaxJsonDepth));
}

// Brackets inside strings (escaped quotes included) are not nesting.
TEST(JsonDepth, CountsOnlyStructure) {
  EXPECT_FALSE(json_too_deep(R"({"a": ")" + std::string(1000, '[') + R"("})"));
  EXPECT_FALSE(json_too_deep(R"({"a": "\"[[[", "b": [[1]]})"));
  EXPECT_TRUE(json_too_deep(std::string(kMaxJsonDepth + 1, '{')));
  EXPECT_FALSE(json_too_deep(std::string(kMaxJsonDepth, '{')));
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("[1, -2]")), "[1,-2]");  // a shape, say
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("[1, [2]]")), "an array of 2 elements");
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("{\"a\": {}}")), "an object of 1 keys");
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("[1,2,3,4,5,6,7,8,9]")), "an array of 9 elements");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(200, 'x'))).size(), 80u);
}

}  // namespace
}  // namespace remat
