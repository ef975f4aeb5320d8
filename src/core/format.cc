#include "core/format.h"

#include <cstdio>

namespace remat {

std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2fGiB", b / (1024.0 * 1024 * 1024));
  } else {
    std::snprintf(buf, sizeof buf, "%.2fMiB", b / (1024.0 * 1024));
  }
  return buf;
}

size_t utf8_sequence_length(const std::string& text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  const size_t n = lead < 0x80                   ? 1
                   : lead >= 0xc2 && lead < 0xe0 ? 2
                   : lead >= 0xe0 && lead < 0xf0 ? 3
                   : lead >= 0xf0 && lead < 0xf5 ? 4
                                                 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t j = 1; j < n; ++j) {
    if ((static_cast<unsigned char>(text[i + j]) & 0xc0) != 0x80) return 0;
  }
  const auto second = n > 1 ? static_cast<unsigned char>(text[i + 1]) : 0x80;
  if ((lead == 0xe0 && second < 0xa0) || (lead == 0xed && second >= 0xa0) ||
      (lead == 0xf0 && second < 0x90) || (lead == 0xf4 && second >= 0x90)) {
    return 0;
  }
  return n;
}

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_sequence_length(text, i);
    const bool control = c < 0x20 ? c != '\n' && c != '\t' : c == 0x7F;
    if (n > 0 && !control) {
      out.append(text, i, n);
      i += n;
      continue;
    }
    char escaped[5];
    std::snprintf(escaped, sizeof escaped, "\\x%02X", c);
    out += escaped;
    ++i;
  }
  return out;
}

std::string shortened(const std::string& text, size_t most) {
  if (text.size() <= most) return text;
  return text.substr(0, most > 3 ? most - 3 : 0) + "... (" + std::to_string(text.size()) +
         " bytes)";
}

}  // namespace remat
