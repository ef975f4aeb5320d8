// How ZeRO-3 / FSDP (parallelism.data_parallel_shard_degree = N) splits the
// training state over N ranks. One definition, read by the runtime (which
// all-gathers and reduce-scatters by it), the planner (which books each
// rank's bytes by it) and sharded checkpoints (whose files are laid out by
// it), so the three cannot drift apart.
//
// Layout:
//  - a unit is one transformer block's parameters, or (block -1) those
//    outside the blocks (embedding, final norm, output) together with any
//    parameter that nodes of several blocks share;
//  - a unit's parameters are concatenated in ParamId order into one flat
//    fp32 buffer of `numel` elements, parameter p starting at offsets[i];
//  - the flat buffer is padded with zeros to ranks x chunk elements, chunk =
//    ceil(numel / ranks); rank r owns elements [r * chunk, (r + 1) * chunk)
//    of it, its shard: the same length on every rank, as the collectives
//    need; owned() clips that range to the real elements.
//  - units are ordered: the outside unit first, then blocks 0, 1, ...
//    (a block with no parameters has no unit).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/program.h"

namespace remat {

struct ShardUnit {
  int32_t block = -1;            // -1: the parameters outside the blocks
  std::vector<ParamId> params;   // ascending
  std::vector<int64_t> offsets;  // params[i] starts at offsets[i] in the flat buffer
  int64_t numel = 0;             // real elements (the sum of the params')
  int64_t chunk = 0;             // each rank's shard length, ceil(numel / ranks)
};

struct ShardLayout {
  int ranks = 1;
  std::vector<ShardUnit> units;
  std::vector<int32_t> unit_of_param;    // index into units, per ParamId
  std::vector<int64_t> offset_of_param;  // first element in its unit's flat buffer

  // The real elements [begin, end) of unit u's flat buffer that rank r owns
  // (empty for a rank whose whole shard is padding).
  std::pair<int64_t, int64_t> owned(size_t u, int rank) const;
  // Elements of every unit's shard on one rank, padding included: the
  // length of each rank's flat parameter (and gradient, and each moment).
  int64_t shard_elements() const;
  // The largest unit's padded flat length (ranks x chunk): the unsharded
  // buffer a rank gathers a unit into.
  int64_t largest_gathered() const;
};

// The layout of `program`'s parameters over `ranks` ranks (>= 1).
ShardLayout make_shard_layout(const Program& program, int ranks);

}  // namespace remat
