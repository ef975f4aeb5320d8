// Shared by the libFuzzer harnesses (tests/fuzz/README.md).
//
// The contract every harness checks: an input either parses or throws
// InputError (what the CLI turns into exit status 2). Anything else is a
// failure: a crash, a sanitizer report (ASan, UBSan; the build aborts on the
// first one), a timeout or an allocation over libFuzzer's -malloc_limit_mb,
// or an exception of any other type, which is reported here and aborts.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace remat::fuzz {

// Runs `body`; an InputError is an expected outcome, any other exception
// aborts with its message so libFuzzer records the input as a crash.
template <typename Body>
void expect_input_errors_only(Body&& body) {
  try {
    body();
  } catch (const InputError&) {
    // The expected way to refuse an input.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception other than InputError escaped: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: a non-std exception escaped\n");
    std::abort();
  }
}

// A fixed-size check that is not an InputError but a broken promise of the
// code under test (e.g. a parsed value outside the range validation allows).
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
  std::abort();
}

// The readers take paths, so each input is written to a scratch file first:
// one folder per process, under $REMAT_FUZZ_TMP (run_fuzzers.sh points it at
// a folder it removes, so nothing is left when a crash skips the cleanup at
// exit), else /dev/shm when it exists (no disk I/O), else the temp folder.
inline const std::string& scratch_folder() {
  static const std::string folder = [] {
    namespace fs = std::filesystem;
    const char* env = std::getenv("REMAT_FUZZ_TMP");
    const fs::path base = env && *env                    ? fs::path(env)
                          : fs::is_directory("/dev/shm") ? fs::path("/dev/shm")
                                                         : fs::temp_directory_path();
    std::string pattern = (base / "remat-fuzz-XXXXXX").string();
    if (!mkdtemp(pattern.data())) {
      std::perror("fuzz: mkdtemp");
      std::abort();
    }
    static std::string to_remove = pattern;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(to_remove, ec);
    });
    return pattern;
  }();
  return folder;
}

// Writes the input to <scratch>/<name> and returns that path.
inline std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_folder() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror("fuzz: writing the scratch file");
    std::abort();
  }
  return path;
}

}  // namespace remat::fuzz
