// Errors that cross the boundary to the user.
//
// InputError means "the user gave us something wrong" (config, CLI, data,
// checkpoint files). The CLI turns it into a message and exit status 2.
// Anything else that escapes is an internal failure (exit status 1).
#pragma once

#include <stdexcept>
#include <string>

namespace remat {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace remat
