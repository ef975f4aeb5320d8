// The remat command line: `remat <command> --config FILE [--section.key value ...]`.
#pragma once

namespace remat {

// Runs the command; returns the process exit status (0 success, 2 bad input,
// 1 anything else) after printing any error to stderr.
int run_cli(int argc, char** argv);

}  // namespace remat
