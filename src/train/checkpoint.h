// Checkpoints: model weights (torchtitan FQNs) and, for resumable training,
// the AdamW moments ("optimizer.exp_avg.<fqn>", "optimizer.exp_avg_sq.<fqn>")
// and the step, in one safetensors file written atomically; or, sharded, a
// step folder that every rank writes its part of (train/sharded_checkpoint.h).
// Loading takes either: a path that is a folder is a sharded checkpoint.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "runtime/model_state.h"
#include "runtime/shard_layout.h"
#include "runtime/sharded_state.h"
#include "train/sharded_checkpoint.h"

namespace remat {

// The name a checkpoint save of `step` takes in its folder:
// step-N.safetensors, or the step folder step-N of a sharded checkpoint.
std::string checkpoint_name(int64_t step, bool sharded);
// N of a name a checkpoint save takes in its folder: step-N.safetensors,
// its temporary step-N.safetensors.tmp, or the sharded step folder step-N;
// nullopt for any other name (step-99.jsonl is a user's file).
std::optional<int64_t> checkpoint_step_of(const std::string& name);

// `run` adds string metadata describing the run that saved (RunRecord).
// The weights are stored as `weights_dtype` (the moments always F32): a
// half type rounds them (checkpoint.export_dtype); an F16 save needs every
// weight within its range (weight_beyond_f16).
void save_checkpoint(const std::string& path, const ModelState& state, int64_t step,
                     bool with_optimizer, const std::map<std::string, std::string>& run = {},
                     SafetensorsDtype weights_dtype = SafetensorsDtype::kF32);
// The first weight too large for fp16 (|x| >= 65520, which rounds to
// infinity), as "<fqn> holds <x>"; nullopt when every weight fits.
std::optional<std::string> weight_beyond_f16(const ModelState& state);

// InputError naming the checkpoint at `path` and its tensor `name` unless
// all n values are finite (saves refuse NaN and inf, so a loaded one is damage
// or a foreign file).
void require_finite(const float* data, int64_t n, const std::string& path, const std::string& name);

// A tensor's name in a single-file checkpoint: the FQN, with the moment's
// prefix for the optimizer state.
std::string checkpoint_tensor_name(ShardPart part, const std::string& fqn);

// Writes a single-file checkpoint of `entries` (named as above) with its
// "step", "format" and the run's metadata; InputError naming `key` when it
// cannot be written.
void write_checkpoint_file(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                           int64_t step, const std::map<std::string, std::string>& run,
                           const std::string& key);

// A replicated state's part for rank `rank` of `layout`: the owned ranges
// copied out of the full tensors (what save_sharded_checkpoint() takes).
struct ReplicaShards {
  std::vector<std::vector<float>> buffers;  // what `shards` points into
  OwnedShards shards;
};
ReplicaShards owned_shards_of(const ModelState& state, const ShardLayout& layout, int rank,
                              bool with_optimizer);
// A sharded runtime's part, under its own layout (the checkpoint's when it
// shards over every rank): the owned ranges of its shards, with the buffers
// (which it keeps replicated in `buffers`, and zero in the shards) laid over
// them. Copies, so the run may go on while the file is written.
ReplicaShards owned_shards_of(const ShardedState& sharded, const ModelState& buffers,
                              bool with_optimizer);

// What a training run records in each checkpoint it saves, so that a resume
// can continue the data where the run stopped and say what changed
// (README "Resuming a run"). -1: not recorded (a seed checkpoint, or one
// written before these keys existed).
struct RunRecord {
  int64_t steps = -1;             // "training.steps": the run's planned length
  int64_t local_batch_size = -1;  // "training.local_batch_size"
  int64_t seq_len = -1;           // "training.seq_len"
  int64_t windows = -1;           // "data.windows": seq_len + 1 token windows in its dataset
  int64_t next_window = -1;       // "data.next_window": where the next batch would start
  int64_t ranks = -1;             // "data.ranks": the data-parallel ranks sharing each batch
  // "data.microbatches": batches of ranks x local_batch_size per optimizer
  // step (gradient accumulation; absent from checkpoints before it: 1).
  int64_t microbatches = -1;
  // "job.settings_digest": of the settings the saved state depends on (the
  // model, data, training, optimizer and schedule, parallelism, and the
  // checkpoint loaded; settings_digest() in dist/comm.h, 16 hex digits;
  // empty: not recorded). Names the save: every shard file of a sharded
  // checkpoint records the run its index records, so a shard spliced in from
  // another run's save of the same step (another seed, say) is refused.
  std::string settings_digest;
  static constexpr const char* kSettingsDigestKey = "job.settings_digest";

  std::map<std::string, std::string> metadata() const;
  // InputError naming `path` and the key unless each present value is a
  // non-negative decimal integer (the digest: 16 lowercase hex digits).
  static RunRecord read(const std::map<std::string, std::string>& metadata,
                        const std::string& path);
};

// What a checkpoint (a file or a sharded step folder) records: its step (0
// if absent) and the run that saved it. InputError for a path that is not a
// valid checkpoint, or malformed metadata (a non-negative decimal integer
// expected, all of it; a positive one for the counts).
struct CheckpointInfo {
  int64_t step = 0;
  RunRecord run;
};
CheckpointInfo read_checkpoint_info(const std::string& path);

// Loads the weights (every parameter must be present with its shape) and, if
// the checkpoint has them and the state wants them, the optimizer moments,
// from a single file or a sharded checkpoint saved with any number of ranks.
// Returns the step stored in it (0 if none) and whether moments were read
// (a weights-only file leaves the state's as they were). InputError on any
// mismatch.
struct LoadedCheckpoint {
  int64_t step = 0;
  bool moments = false;
};
LoadedCheckpoint load_checkpoint(const std::string& path, ModelState& state, bool with_optimizer);

}  // namespace remat
