// Human-readable numbers for logs and messages, shared by every layer that
// reports sizes (the planner's tables, the trainer's log line, errors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace remat {

std::string format_bytes(int64_t bytes);    // "3.21GiB", "512.00MiB"
std::string with_thousands(int64_t value);  // "1,234", "-1,234"

// The length of the valid UTF-8 sequence at text[i]: 1 for ASCII, 2-4, or
// 0 where none starts (no overlong form, surrogate or code point above
// U+10FFFF).
size_t utf8_sequence_length(const std::string& text, size_t i);

// `text` safe to print to a terminal: control characters other than newline
// and tab, and bytes that are not UTF-8, become \xNN. Messages quote what
// users' files hold (a token, a JSON excerpt), which may be any bytes.
std::string printable(const std::string& text);

// `text` as a message quotes a value from a user's file: whole up to `most`
// bytes, else its first bytes, "..." and its length, so that a value of
// any size gives a message of one readable line.
std::string shortened(const std::string& text, size_t most = 80);

}  // namespace remat
