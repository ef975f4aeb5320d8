// Fuzzes the safetensors reader: SafetensorsReader::open (header length,
// JSON header, dtypes (F32, and BF16 and F16 widened), shapes, offsets, the layout rules, metadata
// and checksums), then reads every tensor it lists with the shape it reports (which checks the
// CRC-32C when the file has one).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = remat::fuzz::write_scratch_file("weights.safetensors", data, size);
  remat::fuzz::expect_input_errors_only([&] {
    const remat::SafetensorsReader reader = remat::SafetensorsReader::open(path);
    for (const std::string& name : reader.names()) {
      const std::vector<int64_t> shape = reader.shape(name);
      uint64_t count = 1;
      for (int64_t d : shape) {
        remat::fuzz::require(d >= 0, "dims are >= 0");
        remat::fuzz::require(!__builtin_mul_overflow(count, static_cast<uint64_t>(d), &count),
                             "a tensor's element count fits 64 bits");
      }
      // The layout check ties every tensor to bytes of the file (2 per element
      // at least: BF16 and F16 are read, widened).
      remat::fuzz::require(count * 2 <= size, "a tensor fits inside the file");
      std::vector<float> values(count);
      reader.read(name, shape, values.data());
    }
  });
  return 0;
}
