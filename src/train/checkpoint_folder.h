// The run's checkpoint folder, `<job.dump_folder>/<checkpoint.folder>`: the
// names a run's saves take there, what is checked before a run writes into
// it, one run at a time, what an interrupted save leaves behind, and the
// latest complete checkpoint a run resumes from (README "Resuming a run").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/config.h"

namespace remat {

std::string checkpoint_folder(const JobConfig& config);

// A save's name in the run's checkpoint folder (checkpoint_name).
std::string checkpoint_path(const JobConfig& config, int64_t step, bool sharded);

// Whether `path` is a name a checkpoint save in `folder` takes or passes
// through (checkpoint_step_of).
bool checkpoint_name_in(const std::string& path, const std::string& folder);

// One run at a time per checkpoint folder: a second would resume from the
// same checkpoint, then each would replace the other's saves, and its
// start-up would remove the first one's temporaries in flight. An flock on
// the folder itself (no file is added to it), held until the process ends,
// and past that by a checkpoint snapshot it forked (which holds the same
// open file). A file system without flock goes unlocked.
class CheckpointFolderLock {
 public:
  // InputError when another run holds it.
  explicit CheckpointFolderLock(const std::string& folder);
  ~CheckpointFolderLock();
  CheckpointFolderLock(const CheckpointFolderLock&) = delete;
  CheckpointFolderLock& operator=(const CheckpointFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// The names every save of this run takes, step-N for N in (start_step,
// steps]: an entry already at one of them that a save could not replace (a
// folder where a file goes, a symbolic link, a checkpoint this run reads, a
// leftover temporary that is a folder) is refused now, not when the save
// comes, after the training it would have kept. Only the folder's entries
// are looked at, so a run of a million steps costs no more. Returns, in
// order, the steps whose checkpoints already there this run will replace
// (a resume from an earlier step into a folder holding later ones).
std::vector<int64_t> check_checkpoint_targets(const JobConfig& config, int64_t start_step);

// A seed checkpoint starts runs (it is what a resume from the folder loads
// when nothing newer is there): writing one over another would change
// their weights, so an existing step-0, in either form, is left alone.
void check_no_seed_checkpoint(const JobConfig& config);

// A save killed before its rename leaves "step-N.safetensors.tmp" (as large
// as a checkpoint), or in a sharded step folder "shard-R-of-N.safetensors.tmp"
// and "index.json.tmp" (a snapshot's: "<name>.snapshot-PID.tmp"); the next
// run removes them. Only those exact names are removed, and only in real
// folders: a link named like a step folder is not followed, and another
// file, however named, is the user's. A step folder without its index is an
// incomplete sharded save: it is named, not removed (its shard files may be
// another rank's only copy).
void remove_stale_checkpoint_temporaries(const std::string& folder);

// The latest complete checkpoint in the run's checkpoint folder:
// step-N.safetensors, or a sharded step folder step-N/ holding its index,
// and the N of its name. A training run with checkpointing on and no
// checkpoint.load resumes from it, as torchtitan's does: the same command
// run again continues the run, rather than training afresh over its
// checkpoints.
struct FoundCheckpoint {
  std::string path;  // "" when there is none
  int64_t step = -1;
};
FoundCheckpoint latest_checkpoint(const JobConfig& config);
// The same in any folder; where one step has both forms, the step folder
// when `prefer_sharded`, else the file; only_step >= 0: that step's only.
FoundCheckpoint latest_checkpoint_in(const std::string& folder, bool prefer_sharded,
                                     int64_t only_step = -1);

// Whether a run saves after `step` before its end: every checkpoint.interval
// steps, and step 1 with checkpoint.enable_first_step_checkpoint.
bool saves_after_step(const JobConfig& config, int64_t step);

// The checkpoint a run with checkpointing on and no checkpoint.load resumes
// from: the latest in the folder, or step-<checkpoint.load_step> (either
// form; InputError naming the steps there when it has none complete).
FoundCheckpoint checkpoint_to_resume(const JobConfig& config);

// checkpoint.keep_latest_k (torchtitan's): after the save of `saved_step`
// is complete, the complete checkpoints of the folder at or below that step
// are counted by step, and all but the latest keep_latest_k are removed,
// oldest first (0 keeps every one). Never one above saved_step (a run
// resumed from an earlier step leaves the later ones as they were), never
// an incomplete save or a temporary (remove_stale_checkpoint_temporaries'),
// never a link, and in a step folder only the checkpoint's own files: a
// folder holding anything else stays, with a warning. Failures to remove
// warn and training goes on.
void remove_old_checkpoints(const JobConfig& config, int64_t saved_step);

// The InputError of a failed read of config.checkpoint.load; where train
// found that file in its folder rather than being given it, the message
// says why it was read and how to start afresh.
InputError resume_error(const JobConfig& config, const InputError& e);

}  // namespace remat
