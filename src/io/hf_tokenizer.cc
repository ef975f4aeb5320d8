#include "io/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <compare>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "io/files.h"
#include "io/json_error.h"

namespace remat {
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

// Messages name the file once, then the field that is wrong.
struct Where {
  std::string prefix;
  [[noreturn]] void fail(const std::string& what) const { throw InputError(prefix + what); }
};

// The length of the UTF-8 sequence that starts with `lead`, 0 if none does.
int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 0;
}

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

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t{static_cast<uint32_t>(left)} << 32 | static_cast<uint32_t>(right);
}

// The length of the valid UTF-8 character at text[pos], or 1 where none is.
size_t char_length(std::string_view text, size_t pos) {
  const size_t n = utf8_length(static_cast<unsigned char>(text[pos]));
  if (n == 0 || pos + n > text.size()) return 1;
  for (size_t i = 1; i < n; ++i)
    if ((static_cast<unsigned char>(text[pos + i]) & 0xC0) != 0x80) return 1;
  return n;
}

// A pre-tokenizer split: a PCRE2 pattern, compiled once (JIT where the
// library has it), that never matches invalid UTF-8.
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const Where& where, const std::string& field)
      : where_(where.prefix + field) {
    uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    options |= literal ? PCRE2_LITERAL : PCRE2_UCP;  // UCP: \p{L}, \s, \w are Unicode classes
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                          &error, &offset, nullptr);
    if (!code_)
      throw InputError(where_ + ": the regex " + in_quotes(pattern) + " does not compile (" +
                       message(error) + " at offset " + std::to_string(offset) + ")");
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // faster if it works; matching works either way
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the pieces of `text` as Hugging Face's "Isolated" behaviour
  // cuts them: every match and every stretch between two matches (there,
  // invalid UTF-8); empty matches cut nothing.
  void split(std::string_view text, pcre2_match_data* match,
             std::vector<std::string_view>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0, piece = 0;
    while (start < text.size()) {
      const int rc = pcre2_match(code_, subject, text.size(), start, 0, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw InputError(where_ + ": the regex fails on the text (" + message(rc) + ")");
      const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
      if (span[1] <= span[0]) {  // empty: move on by one character
        if (span[0] >= text.size()) break;
        start = span[0] + char_length(text, span[0]);
        continue;
      }
      if (span[0] > piece) out.push_back(text.substr(piece, span[0] - piece));
      out.push_back(text.substr(span[0], span[1] - span[0]));
      start = piece = span[1];
    }
    if (piece < text.size()) out.push_back(text.substr(piece));
  }

 private:
  static std::string message(int code) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(code, buffer, sizeof buffer);
    return reinterpret_cast<const char*>(buffer);
  }

  pcre2_code* code_ = nullptr;
  std::string where_;
};

}  // namespace

struct HfBpeTokenizer::Model {
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  struct Added {
    std::string content;
    int32_t id;
  };

  std::array<int32_t, 256> byte_ids{};
  std::unordered_map<uint64_t, Merge> merges;  // pair_key(left, right) -> merge
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_ids;  // bytes -> id
  bool ignore_merges = false;
  std::vector<Added> added;  // longest first
  std::array<bool, 256> added_starts{};
  std::vector<std::unique_ptr<Regex>> splits;  // applied in order
  // id -> its bytes: spellings[offsets[id] .. offsets[id + 1]]
  std::string spellings;
  std::vector<uint32_t> offsets;
  int32_t bos = -1, eos = -1;

  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view segment, pcre2_match_data* match,
                      std::vector<int32_t>& out) const;
  const Added* added_at(std::string_view text, size_t pos) const;
};

namespace {

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

const HfBpeTokenizer::Model::Added* HfBpeTokenizer::Model::added_at(std::string_view text,
                                                                    size_t pos) const {
  if (!added_starts[static_cast<unsigned char>(text[pos])]) return nullptr;
  const std::string_view rest = text.substr(pos);
  for (const Added& a : added)
    if (rest.starts_with(a.content)) return &a;
  return nullptr;
}

// Merges as Hugging Face's BPE does: the adjacent pair of lowest rank
// first, the leftmost among equals, one merge at a time. A heap of
// candidates keeps a long pre-token O(n log n); a candidate whose pair has
// changed since it was pushed is skipped.
void HfBpeTokenizer::Model::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (ignore_merges) {
    if (const auto it = token_ids.find(word); it != token_ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank, pos, id;
    auto operator<=>(const Candidate&) const = default;
  };
  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_ids[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
                  true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto merge_of = [&](int32_t pos) -> const Merge* {
    if (pos < 0 || symbols[pos].next < 0) return nullptr;
    const auto it = merges.find(pair_key(symbols[pos].id, symbols[symbols[pos].next].id));
    return it == merges.end() ? nullptr : &it->second;
  };
  auto consider = [&](int32_t pos) {
    if (const Merge* merge = merge_of(pos)) heap.push({merge->rank, pos, merge->id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const Merge* now = symbols[c.pos].alive ? merge_of(c.pos) : nullptr;
    if (!now || now->rank != c.rank) continue;
    Symbol& left = symbols[c.pos];
    const int32_t right = left.next;
    left.id = c.id;
    symbols[right].alive = false;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void HfBpeTokenizer::Model::encode_segment(std::string_view segment, pcre2_match_data* match,
                                           std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  std::vector<std::string_view> pieces = {segment}, next;
  for (const auto& split : splits) {
    next.clear();
    for (std::string_view piece : pieces) split->split(piece, match, next);
    pieces.swap(next);
  }
  for (std::string_view piece : pieces) merge_word(piece, out);
}

HfBpeTokenizer::HfBpeTokenizer(const std::string& path, const std::string& key)
    : model_(std::make_unique<Model>()) {
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
  load_model(member(root, "model", "the file", where), where, *model_, by_id);
  load_added(root, where, *model_, by_id);
  if (const auto it = root.find("pre_tokenizer"); it != root.end())
    load_pre_tokenizer(*it, "pre_tokenizer", 0, where, *model_);
  fill_spellings(by_id, *model_);
}

HfBpeTokenizer::~HfBpeTokenizer() = default;

int64_t HfBpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(model_->offsets.size()) - 1;
}

int32_t HfBpeTokenizer::bos_id() const { return model_->bos; }
int32_t HfBpeTokenizer::eos_id() const { return model_->eos; }

std::vector<int32_t> HfBpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  if (!match) throw std::bad_alloc();
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Model::Added* added = model_->added_at(text, pos);
    if (!added) {
      ++pos;
      continue;
    }
    model_->encode_segment(text.substr(segment, pos - segment), match.get(), ids);
    ids.push_back(added->id);
    pos += added->content.size();
    segment = pos;
  }
  model_->encode_segment(text.substr(segment), match.get(), ids);
  return ids;
}

void HfBpeTokenizer::append_document(std::string_view document, std::vector<int32_t>& out) const {
  if (model_->bos >= 0) out.push_back(model_->bos);
  const std::vector<int32_t> ids = encode(document);
  out.insert(out.end(), ids.begin(), ids.end());
  if (model_->eos >= 0) out.push_back(model_->eos);
}

std::string HfBpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  const auto& offsets = model_->offsets;
  for (int32_t id : ids) {
    if (id >= 0 && (id == model_->bos || id == model_->eos)) continue;
    if (id < 0 || static_cast<size_t>(id) + 1 >= offsets.size()) {
      text += "\xEF\xBF\xBD";  // U+FFFD
      continue;
    }
    text.append(model_->spellings, offsets[id], offsets[id + 1] - offsets[id]);
  }
  return text;
}

}  // namespace remat
