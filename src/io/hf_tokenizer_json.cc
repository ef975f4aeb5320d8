// Reading a Hugging Face tokenizer.json into the tokenizer's model
// (hf_tokenizer_model.h): its BPE vocabulary and merges, added tokens and
// pre-tokenizer splits, each field checked, with messages that name it.
#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/hf_tokenizer_model.h"
#include "io/json_error.h"

namespace remat::hf_bpe {

namespace {

using json = nlohmann::json;

// Llama 3's tokenizer.json is 9 MB, Llama 4's 27 MB.
constexpr int64_t kMaxFileBytes = int64_t{1} << 30;
// Ids above this would only make the decode table huge: the largest released
// vocabularies have about 256k tokens.
constexpr int64_t kMaxVocabSize = int64_t{1} << 22;
// Sequences of pre-tokenizers nest; deeper than this is no real file.
constexpr int kMaxSequenceDepth = 8;

// The split a ByteLevel pre-tokenizer with "use_regex" applies (GPT-2's).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8_of(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// GPT-2's byte-to-unicode alphabet, as UTF-8 -> byte: the printable Latin-1
// bytes stand for themselves, the other 68 for U+0100 onwards in byte order,
// so every byte is spelled by a visible character in the vocabulary.
const std::unordered_map<std::string, unsigned char>& byte_alphabet() {
  static const auto* alphabet = [] {
    auto* map = new std::unordered_map<std::string, unsigned char>();
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      (*map)[utf8_of(printable ? static_cast<char32_t>(b) : next++)] =
          static_cast<unsigned char>(b);
    }
    return map;
  }();
  return *alphabet;
}

// The bytes a vocabulary token spells in that alphabet; false if one of its
// characters is not in it.
bool spelled_bytes(const std::string& token, std::string& bytes) {
  const auto& alphabet = byte_alphabet();
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    const int n = utf8_length(static_cast<unsigned char>(token[i]));
    const auto it = n == 0 ? alphabet.end() : alphabet.find(token.substr(i, n));
    if (it == alphabet.end()) return false;
    bytes += static_cast<char>(it->second);
    i += n;
  }
  return true;
}

const json& member(const json& object, const char* name, const std::string& field,
                   const Where& where) {
  const auto it = object.find(name);
  if (it == object.end()) where.fail(field + " is missing its \"" + name + "\" field");
  return *it;
}

std::string string_member(const json& object, const char* name, const std::string& field,
                          const Where& where) {
  const json& value = member(object, name, field, where);
  if (!value.is_string()) where.fail(field + "." + name + ": expected a string");
  return value.get<std::string>();
}

// A boolean field that may be absent (`fallback`) or null (false).
bool flag_member(const json& object, const char* name, bool fallback, const std::string& field,
                 const Where& where) {
  const auto it = object.find(name);
  if (it == object.end()) return fallback;
  if (it->is_null()) return false;
  if (!it->is_boolean()) where.fail(field + "." + name + ": expected true or false");
  return it->get<bool>();
}

int32_t token_id(const json& value, const std::string& field, const Where& where) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() >= kMaxVocabSize)
    where.fail(field + " = " + json_excerpt(value) + ": expected an integer id in 0.." +
               std::to_string(kMaxVocabSize - 1));
  return static_cast<int32_t>(value.get<int64_t>());
}

// model.vocab: token -> id, each spelled in the byte-level alphabet; the 256
// single-byte tokens must all be there, or some text could not be encoded.
void load_vocab(const json& vocab, const Where& where, HfBpeTokenizer::Model& m,
                std::vector<std::string>& by_id) {
  if (!vocab.is_object()) where.fail("model.vocab: expected an object of token: id");
  std::string bytes;
  for (const auto& [token, value] : vocab.items()) {
    const int32_t id = token_id(value, "model.vocab[" + in_quotes(token) + "]", where);
    if (token.empty()) where.fail("model.vocab: a token is the empty string");
    if (!spelled_bytes(token, bytes))
      where.fail("model.vocab: the token " + in_quotes(token) +
                 " has a character outside GPT-2's byte-to-unicode alphabet; expected a "
                 "byte-level BPE (as Llama 3's)");
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(id + 1);
    if (!by_id[id].empty() || !m.token_ids.emplace(bytes, id).second)
      where.fail("model.vocab: id " + std::to_string(id) + " is given to two tokens");
    by_id[id] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m.token_ids.find(std::string(1, static_cast<char>(b)));
    if (it == m.token_ids.end())
      where.fail("model.vocab has no token for the byte " + std::to_string(b) +
                 "; a byte-level BPE has all 256");
    m.byte_ids[b] = it->second;
  }
}

// One entry of model.merges: "left right" or ["left", "right"].
std::pair<std::string, std::string> merge_parts(const json& entry, const std::string& field,
                                                const Where& where) {
  if (entry.is_string()) {
    const std::string text = entry.get<std::string>();
    const size_t space = text.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == text.size() ||
        text.find(' ', space + 1) != std::string::npos)
      where.fail(field + " = " + in_quotes(text) + ": expected two tokens separated by one space");
    return {text.substr(0, space), text.substr(space + 1)};
  }
  if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_string())
    where.fail(field + ": expected \"left right\" or [\"left\", \"right\"]");
  return {entry[0].get<std::string>(), entry[1].get<std::string>()};
}

// model.merges in rank order: both parts and their concatenation must be
// vocabulary tokens. A pair listed twice keeps its first (lowest) rank.
void load_merges(const json& merges, const Where& where, HfBpeTokenizer::Model& m) {
  if (!merges.is_array()) where.fail("model.merges: expected an array");
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string field = "model.merges[" + std::to_string(rank) + "]";
    const auto [a, b] = merge_parts(merges[rank], field, where);
    const bool spelled = spelled_bytes(a, left) && spelled_bytes(b, right);
    const auto l = m.token_ids.find(left), r = m.token_ids.find(right);
    const auto merged = m.token_ids.find(left + right);
    if (!spelled || l == m.token_ids.end() || r == m.token_ids.end() || merged == m.token_ids.end())
      where.fail(field + " = " + in_quotes(a + " " + b) + ": \"" + a + "\", \"" + b + "\" and \"" +
                 a + b + "\" must all be tokens of model.vocab");
    m.merges.emplace(pair_key(l->second, r->second),
                     HfBpeTokenizer::Model::Merge{static_cast<int32_t>(rank), merged->second});
  }
}

void load_model(const json& model, const Where& where, HfBpeTokenizer::Model& m,
                std::vector<std::string>& by_id) {
  if (!model.is_object()) where.fail("model: expected an object");
  if (model.contains("type") && string_member(model, "type", "model", where) != "BPE")
    where.fail("model.type = " + json_excerpt(model["type"]) + ": expected \"BPE\"");
  if (flag_member(model, "byte_fallback", false, "model", where))
    where.fail("model.byte_fallback = true: expected false (a byte-level BPE needs no fallback)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(affix);
    if (it != model.end() && !it->is_null() && *it != "")
      where.fail(std::string("model.") + affix + " = " + json_excerpt(*it) + ": expected null");
  }
  if (const auto it = model.find("dropout"); it != model.end() && !it->is_null() && *it != 0)
    where.fail("model.dropout = " + json_excerpt(*it) +
               ": expected null (encoding is deterministic)");
  m.ignore_merges = flag_member(model, "ignore_merges", false, "model", where);
  load_vocab(member(model, "vocab", "model", where), where, m, by_id);
  load_merges(member(model, "merges", "model", where), where, m);
}

// added_tokens: matched in the text before anything else. An id may repeat
// a vocabulary token's only with the same bytes (GPT-2's <|endoftext|>).
void load_added(const json& root, const Where& where, HfBpeTokenizer::Model& m,
                std::vector<std::string>& by_id) {
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  if (!it->is_array()) where.fail("added_tokens: expected an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json& token = (*it)[i];
    if (!token.is_object()) where.fail(field + ": expected an object with \"id\" and \"content\"");
    const int32_t id = token_id(member(token, "id", field, where), field + ".id", where);
    const std::string content = string_member(token, "content", field, where);
    if (content.empty()) where.fail(field + ".content is empty");
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(id + 1);
    if (!by_id[id].empty() && by_id[id] != content)
      where.fail(field + ": id " + std::to_string(id) + " is already the token " +
                 in_quotes(by_id[id]));
    by_id[id] = content;
    m.added.push_back({content, id});
    m.added_starts[static_cast<unsigned char>(content[0])] = true;
    if (content == "<|begin_of_text|>" || content == "<s>") m.bos = id;
    if (content == "<|end_of_text|>" || content == "</s>" || content == "<|endoftext|>") m.eos = id;
  }
  std::stable_sort(m.added.begin(), m.added.end(), [](const auto& a, const auto& b) {
    return a.content.size() > b.content.size();
  });
}

void load_pre_tokenizer(const json& p, const std::string& field, int depth, const Where& where,
                        HfBpeTokenizer::Model& m);

void load_split(const json& p, const std::string& field, const Where& where,
                HfBpeTokenizer::Model& m) {
  const json& pattern = member(p, "pattern", field, where);
  const bool regex = pattern.is_object() && pattern.contains("Regex");
  if (!pattern.is_object() || pattern.size() != 1 || !pattern.begin()->is_string() ||
      (!regex && !pattern.contains("String")))
    where.fail(field + ".pattern: expected {\"Regex\": \"...\"} or {\"String\": \"...\"}");
  const std::string behavior = string_member(p, "behavior", field, where);
  if (behavior != "Isolated")
    where.fail(field + ".behavior = " + in_quotes(behavior) + ": expected \"Isolated\"");
  if (flag_member(p, "invert", false, field, where))
    where.fail(field + ".invert = true: expected false");
  m.splits.push_back(std::make_unique<Regex>(pattern.begin()->get<std::string>(), !regex, where,
                                             field + ".pattern"));
}

void load_pre_tokenizer(const json& p, const std::string& field, int depth, const Where& where,
                        HfBpeTokenizer::Model& m) {
  if (p.is_null()) return;
  if (!p.is_object()) where.fail(field + ": expected an object or null");
  const std::string type = string_member(p, "type", field, where);
  if (type == "Sequence") {
    const json& list = member(p, "pretokenizers", field, where);
    if (!list.is_array()) where.fail(field + ".pretokenizers: expected an array");
    if (depth == kMaxSequenceDepth) where.fail(field + ": Sequences nested too deep");
    for (size_t i = 0; i < list.size(); ++i)
      load_pre_tokenizer(list[i], field + ".pretokenizers[" + std::to_string(i) + "]", depth + 1,
                         where, m);
  } else if (type == "Split") {
    load_split(p, field, where, m);
  } else if (type == "ByteLevel") {
    if (flag_member(p, "add_prefix_space", false, field, where))
      where.fail(field + ".add_prefix_space = true: expected false (as in Llama 3's file)");
    if (flag_member(p, "use_regex", true, field, where))
      m.splits.push_back(std::make_unique<Regex>(kGpt2Pattern, false, where, field));
  } else {
    where.fail(field + ".type = " + in_quotes(type) + ": expected Split, ByteLevel or Sequence");
  }
}

// The decode table; ids that name no token decode as U+FFFD.
void fill_spellings(const std::vector<std::string>& by_id, HfBpeTokenizer::Model& m) {
  m.offsets.assign(by_id.size() + 1, 0);
  for (size_t id = 0; id < by_id.size(); ++id) {
    m.spellings += by_id[id].empty() ? "\xEF\xBF\xBD" : by_id[id];
    m.offsets[id + 1] = static_cast<uint32_t>(m.spellings.size());
  }
}

}  // namespace

void read_tokenizer_json(const std::string& path, const std::string& key,
                         HfBpeTokenizer::Model& m) {
  const Where where{key + " = \"" + path + "\": "};
  std::string bytes;
  try {
    bytes =
        read_regular_file(path, "tokenizer file", "a Hugging Face tokenizer.json", kMaxFileBytes);
  } catch (const InputError& e) {
    where.fail(e.what());
  }
  json root;
  if (const std::string problem = json_text_problem(bytes); !problem.empty())
    where.fail("not a Hugging Face tokenizer.json: " + problem);
  try {
    root = json::parse(bytes);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e9999
    where.fail(std::string("not a Hugging Face tokenizer.json: invalid JSON (") +
               json_error_text(e) + ")");
  }
  if (!root.is_object())
    where.fail("not a Hugging Face tokenizer.json: expected a JSON object at the top");
  if (const auto it = root.find("normalizer"); it != root.end() && !it->is_null())
    where.fail("normalizer = " + json_excerpt(*it) + ": expected null (as in Llama 3's)");
  std::vector<std::string> by_id;
  load_model(member(root, "model", "the file", where), where, m, by_id);
  load_added(root, where, m, by_id);
  if (const auto it = root.find("pre_tokenizer"); it != root.end())
    load_pre_tokenizer(*it, "pre_tokenizer", 0, where, m);
  fill_spellings(by_id, m);
}

}  // namespace remat::hf_bpe
