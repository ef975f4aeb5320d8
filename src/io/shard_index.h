// The index of a sharded checkpoint (train/sharded_checkpoint.h): a small
// JSON file, `index.json` in the step folder, that names the shard files and
// the layout their tensors follow (runtime/shard_layout.h):
//
//   {"format": "remat-sharded-checkpoint", "version": 1, "step": 4,
//    "ranks": 2, "with_optimizer": true, "run": {"training.steps": "8", ...},
//    "units": [{"block": -1, "numel": 1024, "chunk": 512,
//               "params": [{"fqn": "tok_embeddings.weight", "shape": [4, 256],
//                           "offset": 0, "id": 0}, ...]}, ...],
//    "files": [{"name": "shard-0-of-2.safetensors", "bytes": 4424}, ...]}
//
// Here, in io, so the parser is fuzzed with the other input parsers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace remat {

inline constexpr const char* kShardIndexName = "index.json";

struct ShardIndex {
  struct Param {
    std::string fqn;
    std::vector<int64_t> shape;
    int64_t offset = 0;  // first element in its unit's flat buffer
    int64_t id = 0;      // its ParamId: the order of a single-file checkpoint's tensors
  };
  struct Unit {
    int32_t block = -1;         // -1: the parameters outside the blocks
    int64_t numel = 0;          // real elements
    int64_t chunk = 0;          // each rank's share, ceil(numel / ranks)
    std::vector<Param> params;  // in flat order: contiguous from offset 0
  };
  int64_t step = 0;
  int ranks = 1;
  bool with_optimizer = false;
  std::map<std::string, std::string> run;  // train/checkpoint.h RunRecord
  std::vector<Unit> units;
  std::vector<std::string> files;   // per rank: a file name in the step folder
  std::vector<int64_t> file_bytes;  // per rank

  // InputError naming `path` and what was expected unless `text` is an
  // index of this format and version, consistent in itself: each unit's
  // parameters tile its numel elements in order, chunk = ceil(numel /
  // ranks), one plain file name (no folder) per rank, no FQN twice, the ids
  // a permutation of 0 .. parameters - 1.
  static ShardIndex parse(const std::string& text, const std::string& path);
  std::string to_json() const;
};

}  // namespace remat
