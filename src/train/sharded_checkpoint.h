// Sharded checkpoints: each rank writes the elements it owns under the ZeRO-3
// layout (runtime/shard_layout.h), so a sharded run saves without gathering
// and a replicated one writes 1/N per rank; any number of ranks (or one
// process) loads them back.
//
// A checkpoint is a step folder, `<checkpoint.folder>/step-N/`:
//  - `shard-R-of-N.safetensors` per rank R: for each unit u with owned
//    elements on R, the tensors "params.u", "exp_avg.u", "exp_avg_sq.u"
//    (the moments only when the optimizer state is saved), each the owned
//    range [owned(u, R).first, owned(u, R).second) of the unit's flat buffer,
//    padding excluded; CRC-32C per tensor as every safetensors file remat
//    writes (io/safetensors.h); its metadata names the format, step, rank
//    and ranks, and holds the save's run record (the index's "run", each key
//    prefixed "run."), so a shard of another save is refused on load;
//  - `index.json`, written last once every shard file is in place (by rank
//    0, or by a snapshot's child, write_shard_and_index_if_complete()):
//    the step, the ranks, the run record (train/checkpoint.h RunRecord), the
//    units (block, numel, chunk, and each parameter's FQN, shape and offset
//    in the flat buffer) and each shard file's name and size in bytes.
// Every file goes to a temporary name and is renamed (io/files.h
// AtomicFile). A folder without index.json is an incomplete save: loading it
// is an error naming what is missing, so the last complete checkpoint is the
// one to load. A save over an existing step folder removes its index first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "graph/program.h"
#include "io/safetensors.h"
#include "io/shard_index.h"
#include "runtime/shard_layout.h"

namespace remat {

// This rank's part of the training state, what save_sharded_checkpoint()
// writes. For each unit u of `layout` (one entry per unit, in unit order):
// the real elements [owned(u, rank).first, owned(u, rank).second) of the
// unit's flat parameters, and of each AdamW moment, as contiguous host fp32
// (a span of exactly that length; padding excluded). A sharded runtime
// passes the first owned-length elements of each unit's shard directly; a
// replicated one copies them out of its full tensors (owned_shards_of() in
// train/checkpoint.h). `exp_avg` and `exp_avg_sq` empty: weights only.
struct OwnedShards {
  const Program* program = nullptr;  // the parameters' FQNs and shapes
  const ShardLayout* layout = nullptr;
  int rank = 0;
  std::vector<std::span<const float>> params;
  std::vector<std::span<const float>> exp_avg;
  std::vector<std::span<const float>> exp_avg_sq;
};

// A collective: every rank of `comm` calls it with its own shards (the
// layout's ranks = comm.size(), rank = comm.rank()). Writes this rank's
// shard file into `folder` (created if missing), then, once every rank's is
// in place, rank 0 writes the index; returns when the checkpoint is
// complete. `run` is the string metadata to record (RunRecord::metadata()).
// When a rank's shard holds non-finite values or its file cannot be written,
// every rank throws before any index is written: the failing rank its own
// error, the others one naming that rank, of the same kind (InputError, exit
// 2, for an unwritable checkpoint.folder; std::runtime_error otherwise).
// Waits are bounded by comm's timeout: the caller sets one long enough for
// the slowest rank's write.
void save_sharded_checkpoint(const std::string& folder, const OwnedShards& shards, int64_t step,
                             const std::map<std::string, std::string>& run, Communicator& comm);

// The two steps of save_sharded_checkpoint() on their own, for tests and
// tools that write each rank's part without a communicator: write_shard_file()
// returns the file's size in bytes; write_shard_index() takes every rank's.
// `tmp_tag` (AtomicFile's tag): a temporary name of the writer's own.
int64_t write_shard_file(const std::string& folder, const OwnedShards& shards, int64_t step,
                         const std::map<std::string, std::string>& run,
                         const std::string& tmp_tag = "");
void write_shard_index(const std::string& folder, const Program& program, const ShardLayout& layout,
                       int64_t step, bool with_optimizer,
                       const std::map<std::string, std::string>& run,
                       const std::vector<int64_t>& file_bytes, const std::string& tmp_tag = "");

// A sharded save by a process that cannot talk to the other ranks (a
// snapshot forked at a stop signal, train/stop_snapshot.h): writes this
// rank's shard file of `step` (under the temporary name `tmp_tag`) and
// renames it into place; then, if every rank's shard file of `step` is in
// place, writes the index, each file's size read from the file. Ranks
// calling it for the same step each look only after their own rename, so
// the last of them to rename sees every file and writes the index (two may,
// the same bytes, each under its own temporary name); a step some rank never
// writes gets no index. Returns true if this call wrote the index; throws as
// write_shard_file() and write_shard_index().
bool write_shard_and_index_if_complete(const std::string& folder, const OwnedShards& shards,
                                       int64_t step, const std::map<std::string, std::string>& run,
                                       const std::string& tmp_tag);

std::string shard_file_name(int rank, int ranks);

// InputError when the file `reader` opened is one rank's shard of a sharded
// checkpoint, given where a single-file checkpoint was expected: it names
// the step folder to load instead (its tensors alone are no model).
void refuse_lone_shard(const SafetensorsReader& reader);

enum class ShardPart { kParams, kExpAvg, kExpAvgSq };

// Reads a sharded checkpoint saved with any number of ranks.
class ShardedCheckpoint {
 public:
  // Parses the index of step folder `folder` and checks that every shard
  // file it names exists with the recorded size. InputError naming the file
  // and what was expected otherwise (no index: an incomplete save).
  static ShardedCheckpoint open(const std::string& folder);

  const ShardIndex& index() const { return index_; }
  const std::string& folder() const { return folder_; }
  bool has(const std::string& fqn) const { return where_.count(fqn) > 0; }

  // Copies elements [begin, end) of parameter `fqn`'s data (row-major, as
  // the tensor of `shape`) of `part` into dst, reading the shard files that
  // hold them (each tensor checked by its CRC-32C). InputError when the
  // checkpoint has no such parameter, or it has another shape, or a shard
  // file does not hold what the index says.
  void read(ShardPart part, const std::string& fqn, const std::vector<int64_t>& shape,
            int64_t begin, int64_t end, float* dst);

  // Rank `rank`'s owned elements of unit `unit` of `layout` (a layout of
  // `program` over any number of ranks), of `part`, into dst: what a sharded
  // runtime loads, resharding the checkpoint to its own ranks.
  void read_owned(ShardPart part, const Program& program, const ShardLayout& layout, size_t unit,
                  int rank, float* dst);

 private:
  const std::vector<float>& source(int rank, const std::string& tensor, int64_t length);

  std::string folder_;
  ShardIndex index_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // FQN -> (unit, param) in the index
  std::vector<std::optional<SafetensorsReader>> readers_;   // per rank, opened on first use
  // The last source tensor read: loading parameter after parameter of one
  // unit reads each shard tensor once.
  int cached_rank_ = -1;
  std::string cached_tensor_;
  std::vector<float> cached_;
};

// Writes the sharded checkpoint `folder` as one single-file checkpoint at
// `out` (train/checkpoint.h: the weights, the moments when saved, the step
// and the run record), the file a single process would have saved.
// InputError for a bad checkpoint or an unwritable `out` (nothing written).
void convert_sharded_checkpoint(const std::string& folder, const std::string& out);

}  // namespace remat
