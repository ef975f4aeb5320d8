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

}  // namespace remat
