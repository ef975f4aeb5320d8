#include "train/checkpoint_folder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace remat {
namespace {

namespace fs = std::filesystem;

// A scratch dump folder holding checkpoint/, removed at the end.
class KeepLatestK : public ::testing::Test {
 protected:
  void SetUp() override {
    dump_ = fs::temp_directory_path() / ("remat_keep_latest_k_" + std::to_string(::getpid()));
    fs::remove_all(dump_);
    fs::create_directories(dump_ / "checkpoint");
    config_.job.dump_folder = dump_.string();
    config_.checkpoint.folder = "checkpoint";
  }
  void TearDown() override { fs::remove_all(dump_); }

  fs::path at(const std::string& name) const { return dump_ / "checkpoint" / name; }
  static void touch(const fs::path& p) { std::ofstream(p) << "x"; }
  void file_checkpoint(int64_t step) { touch(at("step-" + std::to_string(step) + ".safetensors")); }
  // A sharded step folder; complete when it holds its index.
  void folder_checkpoint(int64_t step, bool complete) {
    const fs::path folder = at("step-" + std::to_string(step));
    fs::create_directories(folder);
    touch(folder / "shard-0-of-2.safetensors");
    touch(folder / "shard-1-of-2.safetensors");
    if (complete) touch(folder / "index.json");
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dump_ / "checkpoint"))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dump_;
  JobConfig config_;
};

TEST_F(KeepLatestK, KeepsTheLatestKStepsAtOrBelowTheSaveAndNothingElseIsTouched) {
  for (int64_t step : {0, 2, 4, 6, 8}) file_checkpoint(step);
  folder_checkpoint(5, /*complete=*/true);
  folder_checkpoint(3, /*complete=*/false);  // an incomplete save: never removed
  touch(at("step-1.safetensors.tmp"));       // a temporary: the stale cleanup's
  touch(at("notes.txt"));                    // the user's
  fs::create_symlink(at("step-0.safetensors"), at("step-7.safetensors"));  // a link
  folder_checkpoint(9, /*complete=*/true);  // above the save: a resumed run's later
  config_.checkpoint.keep_latest_k = 3;
  remove_old_checkpoints(config_, 8);
  // Kept: 8, 6, 5 (the step folder counts as its step); removed: 4, 2, 0.
  EXPECT_EQ(listing(),
            (std::vector<std::string>{"notes.txt", "step-1.safetensors.tmp", "step-3", "step-5",
                                      "step-6.safetensors", "step-7.safetensors",
                                      "step-8.safetensors", "step-9"}));
  EXPECT_TRUE(fs::exists(at("step-3") / "shard-0-of-2.safetensors"));
}

TEST_F(KeepLatestK, NothingIsRemovedBeforeTheNewSaveIsComplete) {
  for (int64_t step : {1, 2, 3}) file_checkpoint(step);
  folder_checkpoint(4, /*complete=*/false);  // its last rank has not written the index yet
  config_.checkpoint.keep_latest_k = 1;
  remove_old_checkpoints(config_, 4);
  EXPECT_EQ(listing().size(), 4u);
  touch(at("step-4") / "index.json");
  remove_old_checkpoints(config_, 4);
  EXPECT_EQ(listing(), (std::vector<std::string>{"step-4"}));
}

TEST_F(KeepLatestK, ZeroKeepsEveryCheckpoint) {
  for (int64_t step : {1, 2, 3}) file_checkpoint(step);
  config_.checkpoint.keep_latest_k = 0;
  remove_old_checkpoints(config_, 3);
  EXPECT_EQ(listing().size(), 3u);
}

TEST_F(KeepLatestK, AStepFolderHoldingTheUsersFilesLosesOnlyTheCheckpointsOwn) {
  folder_checkpoint(1, /*complete=*/true);
  touch(at("step-1") / "shard-0-of-2.safetensors.tmp");  // a save's temporary: the checkpoint's
  touch(at("step-1") / "README");                        // the user's
  folder_checkpoint(2, /*complete=*/true);
  config_.checkpoint.keep_latest_k = 1;
  remove_old_checkpoints(config_, 2);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(at("step-1")))
    left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"README"});
  EXPECT_EQ(listing(), (std::vector<std::string>{"step-1", "step-2"}));
}

}  // namespace
}  // namespace remat
