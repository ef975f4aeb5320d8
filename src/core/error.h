// Errors that cross the boundary to the user.
//
// InputError means "the user gave us something wrong" (config, CLI, data,
// checkpoint files). The CLI turns it into a message and exit status 2.
// OutputError (below) is exit status 1 with its message; anything else that
// escapes is an internal failure (exit status 1).
#pragma once

#include <stdexcept>
#include <string>

namespace remat {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// OutputError means "the system would not store an output whose target
// passed the checks": the disk filled up, a file-size limit, an I/O error,
// mid-run where a save or a log line meets it. Not bad input (the same
// command succeeds with room on the disk) and not a bug: exit status 1 with
// the message, the file's old content (or its absence) kept, no temporary
// left behind.
class OutputError : public std::runtime_error {
 public:
  explicit OutputError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace remat
