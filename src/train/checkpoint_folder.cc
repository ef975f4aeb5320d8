#include "train/checkpoint_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
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

// Whether `name` is a file a sharded save writes into its step folder:
// index.json or shard-R-of-S.safetensors.
bool step_folder_file(std::string_view name) {
  if (name == kShardIndexName) return true;
  constexpr std::string_view kPrefix = "shard-", kSuffix = ".safetensors";
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return false;
  name = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  const size_t of = name.find("-of-");
  return of != std::string_view::npos && all_digits(name.substr(0, of)) &&
         all_digits(name.substr(of + 4));
}

// Whether `name`, in a sharded step folder, is a temporary a save writes
// there: a step_folder_file's name, then ".tmp", or a snapshot's
// ".snapshot-PID.tmp" (train/stop_snapshot.h).
bool step_folder_temporary(std::string_view name) {
  if (!name.ends_with(".tmp")) return false;
  name.remove_suffix(4);
  if (const size_t dot = name.rfind(".snapshot-");
      dot != std::string_view::npos && all_digits(name.substr(dot + 10)))
    name = name.substr(0, dot);
  return step_folder_file(name);
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
    const bool saved = saves_after_step(config, *step) || *step == config.training.steps;
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

FoundCheckpoint latest_checkpoint_in(const std::string& folder, bool prefer_sharded,
                                     int64_t only_step) {
  namespace fs = std::filesystem;
  int64_t best = -1;
  std::string found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = checkpoint_step_of(name);
    if (!step || *step < best || (only_step >= 0 && *step != only_step)) continue;
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

namespace {

// A complete checkpoint in the folder: a regular file step-N.safetensors, or
// a real step folder step-N/ holding its index (links are never followed).
struct CompleteCheckpoint {
  int64_t step;
  std::filesystem::path path;
  bool step_folder;
};

std::vector<CompleteCheckpoint> complete_checkpoints_in(const std::string& folder) {
  namespace fs = std::filesystem;
  std::vector<CompleteCheckpoint> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = checkpoint_step_of(name);
    if (!step || entry.is_symlink(ec)) continue;
    for (const bool step_folder : {false, true}) {
      if (name != checkpoint_name(*step, step_folder)) continue;
      const bool complete =
          step_folder
              ? entry.is_directory(ec) && fs::is_regular_file(entry.path() / kShardIndexName, ec)
              : entry.is_regular_file(ec);
      if (complete) found.push_back({*step, entry.path(), step_folder});
    }
  }
  return found;
}

// Removes a complete checkpoint: the file, or the step folder's index and
// shards (and temporaries of theirs), then the folder if nothing else is in
// it. Anything else there is the user's and stays; the run says so.
void remove_checkpoint(const CompleteCheckpoint& c) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (c.step_folder) {
    // The index first: a folder left half removed is then an incomplete
    // save, which no resume loads.
    fs::remove(c.path / kShardIndexName, ec);
    std::vector<fs::path> ours;
    for (const fs::directory_entry& entry : fs::directory_iterator(c.path, ec)) {
      const std::string name = entry.path().filename().string();
      if ((step_folder_file(name) || step_folder_temporary(name)) && entry.is_regular_file(ec) &&
          !entry.is_symlink(ec))
        ours.push_back(entry.path());
    }
    for (const fs::path& file : ours) fs::remove(file, ec);
  }
  if (fs::remove(c.path, ec) && !ec) {
    std::printf("removed %s (checkpoint.keep_latest_k)\n", c.path.string().c_str());
    return;
  }
  std::fflush(stdout);
  std::fprintf(
      stderr,
      "warning: checkpoint.keep_latest_k: cannot remove %s (%s); it is left in "
      "place\n",
      c.path.string().c_str(),
      c.step_folder ? "it holds files that are not the checkpoint's" : ec.message().c_str());
}

}  // namespace

void remove_old_checkpoints(const JobConfig& config, int64_t saved_step) {
  const int64_t keep = config.checkpoint.keep_latest_k;
  if (keep <= 0) return;
  std::vector<CompleteCheckpoint> found = complete_checkpoints_in(checkpoint_folder(config));
  // Only once the save of saved_step is complete (a sharded save's index is
  // written by its last rank), and only below it: later steps are a resumed
  // run's own future saves, or the checkpoints it was resumed before.
  if (std::none_of(found.begin(), found.end(),
                   [&](const CompleteCheckpoint& c) { return c.step == saved_step; }))
    return;
  std::vector<int64_t> steps;
  for (const CompleteCheckpoint& c : found)
    if (c.step <= saved_step) steps.push_back(c.step);
  std::sort(steps.begin(), steps.end(), std::greater<>());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  if (std::ssize(steps) <= keep) return;
  const int64_t oldest_kept = steps[static_cast<size_t>(keep - 1)];
  std::sort(
      found.begin(), found.end(),
      [](const CompleteCheckpoint& a, const CompleteCheckpoint& b) { return a.step < b.step; });
  for (const CompleteCheckpoint& c : found)
    if (c.step < oldest_kept) remove_checkpoint(c);
}

bool saves_after_step(const JobConfig& config, int64_t step) {
  return step % config.checkpoint.interval == 0 ||
         (config.checkpoint.enable_first_step_checkpoint && step == 1);
}

FoundCheckpoint checkpoint_to_resume(const JobConfig& config) {
  const int64_t wanted = config.checkpoint.load_step;
  const std::optional<std::string> folder = listable_checkpoint_folder(config);
  const FoundCheckpoint found =
      folder ? latest_checkpoint_in(*folder, sharded_checkpoints(config), wanted)
             : FoundCheckpoint{};
  if (wanted < 0 || !found.path.empty()) return found;
  std::vector<int64_t> steps;
  if (folder)
    for (const CompleteCheckpoint& c : complete_checkpoints_in(*folder)) steps.push_back(c.step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::string there;
  for (const int64_t s : steps) there += (there.empty() ? "" : ", ") + std::to_string(s);
  throw InputError("checkpoint.load_step = " + std::to_string(wanted) +
                   ": no complete checkpoint of that step in '" + checkpoint_folder(config) +
                   "' (expected a step saved there: " + (there.empty() ? "none is" : there) +
                   "; or -1 for the latest)");
}

InputError resume_error(const JobConfig& config, const InputError& e) {
  if (!config.checkpoint.load_found_in_folder) return e;
  if (config.checkpoint.load_step >= 0)
    return InputError(std::string(e.what()) +
                      "; it is the checkpoint of checkpoint.load_step in checkpoint.folder "
                      "(expected a checkpoint of this run: name another step, or -1 for the "
                      "latest)");
  return InputError(std::string(e.what()) +
                    "; it is the latest checkpoint in checkpoint.folder, which a run with "
                    "checkpointing on resumes from (expected a checkpoint of this run: move it "
                    "away, name another with checkpoint.load, or start afresh in a new "
                    "job.dump_folder)");
}

}  // namespace remat
