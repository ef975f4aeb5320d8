// Human-readable numbers for logs and messages, shared by every layer that
// reports sizes (the planner's tables, the trainer's log line, errors).
#pragma once

#include <cstdint>
#include <string>

namespace remat {

std::string format_bytes(int64_t bytes);    // "3.21GiB", "512.00MiB"
std::string with_thousands(int64_t value);  // "1,234", "-1,234"

}  // namespace remat
