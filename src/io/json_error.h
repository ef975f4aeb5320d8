// JSON inputs: what a parse error says, for remat's own messages, the
// nesting remat accepts, and how a message quotes a value.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace remat {

// nlohmann's what() starts with its own id ("[json.exception.parse_error.101]
// parse error at line 1, column 3: ..."); the rest says where and what, which
// is what a user can act on, so the id is dropped.
inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string text = e.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return text;
}

// How deep the JSON inputs may nest. Every file remat reads is shallow (a
// tokenizer.json nests 5 deep, a safetensors header 3); nlohmann parses any
// depth, but copying or printing a value recurses once per level, and a
// file of 100,000 brackets overflowed the stack.
inline constexpr int kMaxJsonDepth = 512;

// Whether `text` nests arrays and objects deeper than kMaxJsonDepth (strings
// skipped, so brackets inside them do not count). Checked before parsing.
inline bool json_too_deep(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// The message for a text json_too_deep refuses.
inline std::string json_depth_text() {
  return "arrays and objects nested more than " + std::to_string(kMaxJsonDepth) +
         " deep (expected the shallow JSON of this file type)";
}

// What makes `text` no JSON input remat parses, checked before parsing: ""
// when nothing does. nlohmann takes a NUL byte for the end of the input, so
// a file of JSON, a NUL and anything at all parsed as the JSON alone.
inline std::string json_text_problem(std::string_view text) {
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return "a NUL byte at offset " + std::to_string(nul) + " (expected JSON text, which has none)";
  if (json_too_deep(text)) return json_depth_text();
  return "";
}

// A JSON value as an error message quotes it: as JSON (at most 80
// characters of it) where it is a number, string or literal, or a short
// flat array or object (a shape, offsets); any other array or object by its
// size, so that a message never prints a whole (huge, or deep) structure.
inline std::string json_excerpt(const nlohmann::json& value) {
  if (value.is_structured()) {
    bool flat = value.size() <= 8;
    for (const auto& element : value) flat = flat && element.is_primitive();
    if (!flat && value.is_array())
      return "an array of " + std::to_string(value.size()) + " elements";
    if (!flat) return "an object of " + std::to_string(value.size()) + " keys";
  }
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

}  // namespace remat
