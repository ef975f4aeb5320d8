// What a JSON parse error says, for remat's own messages.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

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

}  // namespace remat
