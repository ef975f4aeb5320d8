// Fuzzes the TOML job config: parse_job_config (toml++ and remat's schema,
// types and range checks), then what every command does next with a valid
// config: resolve the model's arguments and check its sizes (models/limits),
// and read memory.limit and a memory_budget size.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "fuzz_model.h"
#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  remat::fuzz::expect_input_errors_only([&] {
    const remat::JobConfig config = remat::parse_job_config(text, "fuzz.toml", {});
    remat::fuzz::check_valid_config(config);
  });
  return 0;
}
