// Fuzzes the .npy token reader (read_npy_tokens): magic, version, header
// length, the Python-literal header dict, dtype, shape and data. A token
// file's contract: every id it returns is >= 0 and it returns exactly the
// count the shape says.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = remat::fuzz::write_scratch_file("tokens.npy", data, size);
  remat::fuzz::expect_input_errors_only([&] {
    const std::vector<int32_t> tokens = remat::read_npy_tokens(path);
    remat::fuzz::require(tokens.size() <= size, "no more tokens than bytes in the file");
    for (int32_t t : tokens) remat::fuzz::require(t >= 0, "token ids are >= 0");
  });
  return 0;
}
