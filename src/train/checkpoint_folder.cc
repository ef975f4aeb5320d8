#include "train/checkpoint_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string_view>

#include "io/files.h"
#include "io/shard_index.h"
#include "train/checkpoint.h"

namespace remat {

namespace {

// The checkpoint folder as it can be listed now: its configured path, or,
// where that does not resolve yet (".." in checkpoint.folder under a
// job.dump_folder still to be created), the existing folder it will name.
// nullopt when there is none yet. A folder that exists but cannot be listed
// is an InputError: read as empty, a run would train afresh and replace the
// checkpoints in it.
std::optional<std::string> listable_checkpoint_folder(const JobConfig& config) {
  namespace fs = std::filesystem;
  std::string folder = checkpoint_folder(config);
  std::error_code ec;
  if (!fs::exists(folder, ec)) {
    const fs::path resolved = fs::weakly_canonical(folder, ec);
    if (ec || !fs::exists(resolved, ec)) return std::nullopt;
    folder = resolved.string();
  }
  if (!fs::is_directory(folder, ec)) return std::nullopt;  // refused by the output checks
  fs::directory_iterator listing(folder, ec);
  if (ec)
    throw InputError("checkpoint.folder: cannot list '" + folder + "' (" + ec.message() +
                     "); expected a folder this run can read (with checkpointing on a run "
                     "resumes from the latest checkpoint in it, and checks the names its saves "
                     "take)");
  return folder;
}

// Whether `s` is a decimal number as remat writes one: digits only.
bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c); });
}

// Whether `name`, in a sharded step folder, is a temporary a save writes
// there: shard-R-of-S.safetensors or index.json, then ".tmp", or a
// snapshot's ".snapshot-PID.tmp" (train/stop_snapshot.h).
bool step_folder_temporary(std::string_view name) {
  if (!name.ends_with(".tmp")) return false;
  name.remove_suffix(4);
  if (const size_t dot = name.rfind(".snapshot-");
      dot != std::string_view::npos && all_digits(name.substr(dot + 10)))
    name = name.substr(0, dot);
  if (name == kShardIndexName) return true;
  constexpr std::string_view kPrefix = "shard-", kSuffix = ".safetensors";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return false;
  name = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const size_t of = name.find("-of-");
  return of != std::string_view::npos && all_digits(name.substr(0, of)) &&
         all_digits(name.substr(of + 4));
}

// The folder's stale temporaries; `top`: the checkpoint folder itself, not
// a step folder in it.
void remove_stale_temporaries_in(const std::string& folder, bool top) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string target = entry.path().string();
    const std::optional<int64_t> step = top ? checkpoint_step_of(name) : std::nullopt;
    if (step && name == checkpoint_name(*step, /*sharded=*/true)) {
      if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
      remove_stale_temporaries_in(target, false);
      if (!fs::exists(entry.path() / kShardIndexName, ec))
        std::printf("note: %s has no %s: an incomplete sharded checkpoint, not loadable\n",
                    target.c_str(), kShardIndexName);
      continue;
    }
    const bool stale = top ? step && name == checkpoint_name(*step, /*sharded=*/false) + ".tmp"
                           : step_folder_temporary(name);
    if (stale && remove_stale_temporary(target.substr(0, target.size() - 4)))
      std::printf("removed %s, left by an interrupted save\n", target.c_str());
  }
}

}  // namespace

std::string checkpoint_folder(const JobConfig& config) {
  return (std::filesystem::path(config.job.dump_folder) / config.checkpoint.folder).string();
}

std::string checkpoint_path(const JobConfig& config, int64_t step, bool sharded) {
  return (std::filesystem::path(checkpoint_folder(config)) / checkpoint_name(step, sharded))
      .string();
}

bool checkpoint_name_in(const std::string& path, const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec1, ec2;
  const fs::path p = fs::weakly_canonical(fs::absolute(fs::path(path), ec1), ec1);
  const fs::path f = fs::weakly_canonical(fs::absolute(fs::path(folder), ec2), ec2);
  if (ec1 || ec2 || p.parent_path() != f) return false;
  return checkpoint_step_of(p.filename().string()).has_value();
}

CheckpointFolderLock::CheckpointFolderLock(const std::string& folder) {
  fd_ = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0 || ::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int error = errno;
  ::close(fd_);
  fd_ = -1;
  if (error == EWOULDBLOCK)
    throw InputError("checkpoint.folder: '" + folder +
                     "' is in use by another remat run (or a checkpoint snapshot one left "
                     "writing); expected one run per checkpoint folder: wait for it to end, "
                     "or give this run another job.dump_folder");
}

CheckpointFolderLock::~CheckpointFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<int64_t> check_checkpoint_targets(const JobConfig& config, int64_t start_step) {
  namespace fs = std::filesystem;
  const bool sharded = sharded_checkpoints(config);
  const std::optional<std::string> folder = listable_checkpoint_folder(config);
  if (!folder) return {};  // no folder yet: nothing in the way
  std::vector<int64_t> replaced;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(*folder, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = checkpoint_step_of(name);
    if (!step || *step <= start_step || *step > config.training.steps) continue;
    const std::string target = checkpoint_path(config, *step, sharded);
    if (sharded) {
      check_output_folder(target, "checkpoint.folder");
    } else {
      check_output_file(target, "checkpoint.folder");
    }
    const bool saved = *step % config.checkpoint.interval == 0 || *step == config.training.steps;
    if (saved && name == checkpoint_name(*step, sharded)) replaced.push_back(*step);
  }
  std::sort(replaced.begin(), replaced.end());
  return replaced;
}

void check_no_seed_checkpoint(const JobConfig& config) {
  namespace fs = std::filesystem;
  for (const bool sharded : {false, true}) {
    const std::string path = checkpoint_path(config, 0, sharded);
    std::error_code ec;
    // (A folder that cannot be searched is check_output_folder's to refuse.)
    if (fs::symlink_status(path, ec).type() == fs::file_type::not_found || ec) continue;
    throw InputError("checkpoint.create_seed_checkpoint: '" + path +
                     "' already exists (expected no step-0 in checkpoint.folder: a seed "
                     "checkpoint does not replace one; move it away or choose another "
                     "checkpoint.folder)");
  }
}

void remove_stale_checkpoint_temporaries(const std::string& folder) {
  remove_stale_temporaries_in(folder, /*top=*/true);
}

FoundCheckpoint latest_checkpoint_in(const std::string& folder, bool prefer_sharded) {
  namespace fs = std::filesystem;
  int64_t best = -1;
  std::string found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = checkpoint_step_of(name);
    if (!step || *step < best) continue;
    // Complete checkpoints only, by their exact names: a file's temporary
    // or a step folder whose index was never written is not one.
    for (const bool step_folder : {false, true}) {
      if (name != checkpoint_name(*step, step_folder)) continue;
      const bool complete = step_folder ? fs::is_regular_file(entry.path() / kShardIndexName, ec)
                                        : fs::is_regular_file(entry.path(), ec);
      // Where one step has both forms, the preferred one wins.
      if (complete && (*step > best || step_folder == prefer_sharded)) {
        best = *step;
        found = entry.path().string();
      }
    }
  }
  return {found, best};
}

FoundCheckpoint latest_checkpoint(const JobConfig& config) {
  const std::optional<std::string> folder = listable_checkpoint_folder(config);
  if (!folder) return {};
  return latest_checkpoint_in(*folder, sharded_checkpoints(config));
}

InputError resume_error(const JobConfig& config, const InputError& e) {
  if (!config.checkpoint.load_found_in_folder) return e;
  return InputError(std::string(e.what()) +
                    "; it is the latest checkpoint in checkpoint.folder, which a run with "
                    "checkpointing on resumes from (expected a checkpoint of this run: move it "
                    "away, name another with checkpoint.load, or start afresh in a new "
                    "job.dump_folder)");
}

}  // namespace remat
