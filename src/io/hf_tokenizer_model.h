// The parts of a Hugging Face tokenizer.json tokenizer (hf_tokenizer.h)
// that reading the file (hf_tokenizer_json.cc) and encoding with it
// (hf_tokenizer.cc) share: its in-memory model, the PCRE2 pre-tokenizer
// splits, and UTF-8 helpers. Internal to src/io.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "io/hf_tokenizer.h"

namespace remat {
namespace hf_bpe {

// Messages name the file once, then the field that is wrong.
struct Where {
  std::string prefix;
  [[noreturn]] void fail(const std::string& what) const { throw InputError(prefix + what); }
};

// The length of the UTF-8 sequence that starts with `lead`, 0 if none does.
inline int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 0;
}

inline std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

inline uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t{static_cast<uint32_t>(left)} << 32 | static_cast<uint32_t>(right);
}

// The length of the valid UTF-8 character at text[pos], or 1 where none is.
inline size_t char_length(std::string_view text, size_t pos) {
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

}  // namespace hf_bpe

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
  std::unordered_map<std::string, int32_t, hf_bpe::StringHash, std::equal_to<>>
      token_ids;  // bytes -> id
  bool ignore_merges = false;
  std::vector<Added> added;  // longest first
  std::array<bool, 256> added_starts{};
  std::vector<std::unique_ptr<hf_bpe::Regex>> splits;  // applied in order
  // id -> its bytes: spellings[offsets[id] .. offsets[id + 1]]
  std::string spellings;
  std::vector<uint32_t> offsets;
  int32_t bos = -1, eos = -1;

  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_segment(std::string_view segment, pcre2_match_data* match,
                      std::vector<int32_t>& out) const;
  const Added* added_at(std::string_view text, size_t pos) const;
};

namespace hf_bpe {

// Reads the tokenizer.json at `path` into `m`; InputError, prefixed with
// `key = "path": `, for a file that is not one this tokenizer reads.
void read_tokenizer_json(const std::string& path, const std::string& key, HfBpeTokenizer::Model& m);

}  // namespace hf_bpe
}  // namespace remat
