// Fuzzes the sharded checkpoint index parser: ShardIndex::parse (JSON, the
// format and version, integer ranges, units tiling their parameters, chunk
// sizes, file names, unique FQNs and ids), then holds what it accepts to its
// contract: to_json() parses back to the same index.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "io/shard_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  remat::fuzz::expect_input_errors_only([&] {
    const remat::ShardIndex index = remat::ShardIndex::parse(text, "index.json");
    remat::fuzz::require(static_cast<int64_t>(index.files.size()) == index.ranks,
                         "one file per rank");
    for (const remat::ShardIndex::Unit& u : index.units)
      remat::fuzz::require(u.chunk * index.ranks >= u.numel, "the shards cover the unit");
    const std::string again = index.to_json();
    remat::fuzz::require(remat::ShardIndex::parse(again, "again").to_json() == again,
                         "to_json() parses back to the same index");
  });
  return 0;
}
