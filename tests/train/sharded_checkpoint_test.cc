// Sharded checkpoints (train/sharded_checkpoint.h): a state saved as N rank
// files loads back bit for bit into one process, into the owned ranges of M
// ranks (resharding), and converts to the very file a single process saves;
// damaged or incomplete checkpoints are InputErrors naming what is wrong.
#include "train/sharded_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/registry.h"
#include "train/checkpoint.h"

namespace remat {
namespace {

namespace fs = std::filesystem;

// A small llama4 (MoE layers, expert_bias buffers) keeps the files small.
Program small_program() {
  JobConfig::Model model;
  model.name = "llama4";
  model.flavor = "debugmodel";
  model.dim = 64;
  model.n_heads = 4;
  model.n_kv_heads = 4;
  return build_model(model, /*batch=*/1, /*seq=*/8).program;
}

std::vector<float> host(const ModelState& state, const Tensor& t) {
  const HostView view(*state.backend, t);
  return std::vector<float>(view.data(), view.data() + t.numel());
}

// Weights from a seed and moments that differ from the weights and each
// other, so a part read from the wrong tensor shows.
void fill(ModelState& state, uint64_t seed) {
  state.initialize(seed);
  state.ensure_optimizer_state();
  for (size_t i = 0; i < state.params.size(); ++i) {
    float* a = state.exp_avg[i].data();
    float* b = state.exp_avg_sq[i].data();
    for (int64_t k = 0; k < state.exp_avg[i].numel(); ++k) {
      a[k] = 0.001f * static_cast<float>(i) + 1e-6f * static_cast<float>(k);
      b[k] = 0.5f + 1e-7f * static_cast<float>(k + static_cast<int64_t>(i));
    }
  }
}

const std::map<std::string, std::string> kRun = {
    {"training.steps", "9"}, {"data.ranks", "3"}, {"job.settings_digest", "00000000000000a1"}};
// Another run's, of the same length: its save's files have the same sizes.
const std::map<std::string, std::string> kOtherRun = {
    {"training.steps", "9"}, {"data.ranks", "3"}, {"job.settings_digest", "00000000000000b2"}};

// What save_sharded_checkpoint() writes with `ranks` ranks, one rank at a
// time; `shard_run`, where given, is what the shard files record instead
// of the index's run.
void save_as_ranks(const ModelState& state, int ranks, const std::string& folder, int64_t step,
                   const std::map<std::string, std::string>& run = kRun,
                   const std::map<std::string, std::string>* shard_run = nullptr) {
  const ShardLayout layout = make_shard_layout(*state.program, ranks);
  std::vector<int64_t> bytes;
  for (int r = 0; r < ranks; ++r) {
    const ReplicaShards mine = owned_shards_of(state, layout, r, /*with_optimizer=*/true);
    bytes.push_back(write_shard_file(folder, mine.shards, step, shard_run ? *shard_run : run));
  }
  write_shard_index(folder, *state.program, layout, step, true, run, bytes);
}

class ShardedCheckpointTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("remat_sharded_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fill(state_, 7);
    save_as_ranks(state_, 3, folder(), 5);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string folder() const { return (dir_ / "step-5").string(); }

  Program program_ = small_program();
  Allocator allocator_;
  ModelState state_{program_, allocator_, /*with_gradients=*/false};
  fs::path dir_;
};

TEST_F(ShardedCheckpointTest, LoadsBackBitForBitIntoOneProcess) {
  Allocator allocator;
  ModelState loaded(program_, allocator, false);
  loaded.initialize(99);
  loaded.ensure_optimizer_state();
  EXPECT_EQ(load_checkpoint(folder(), loaded, /*with_optimizer=*/true).step, 5);
  for (size_t i = 0; i < program_.params.size(); ++i) {
    EXPECT_EQ(host(loaded, loaded.params[i]), host(state_, state_.params[i])) << i;
    EXPECT_EQ(host(loaded, loaded.exp_avg[i]), host(state_, state_.exp_avg[i])) << i;
    EXPECT_EQ(host(loaded, loaded.exp_avg_sq[i]), host(state_, state_.exp_avg_sq[i])) << i;
  }
  const CheckpointInfo info = read_checkpoint_info(folder());
  EXPECT_EQ(info.step, 5);
  EXPECT_EQ(info.run.steps, 9);
  EXPECT_EQ(info.run.ranks, 3);
}

// Saved by 3 ranks, read as the owned ranges of 2 (and of 4, where a rank
// may own padding only): each equals what those ranks would have saved.
TEST_F(ShardedCheckpointTest, ReshardsToOtherRankCounts) {
  ShardedCheckpoint c = ShardedCheckpoint::open(folder());
  for (int ranks : {1, 2, 4}) {
    const ShardLayout layout = make_shard_layout(program_, ranks);
    for (int r = 0; r < ranks; ++r) {
      const ReplicaShards want = owned_shards_of(state_, layout, r, true);
      for (size_t u = 0; u < layout.units.size(); ++u) {
        const std::span<const float> parts[] = {want.shards.params[u], want.shards.exp_avg[u],
                                                want.shards.exp_avg_sq[u]};
        for (int part = 0; part < 3; ++part) {
          std::vector<float> got(parts[part].size(), -1.0f);
          c.read_owned(static_cast<ShardPart>(part), program_, layout, u, r, got.data());
          EXPECT_TRUE(std::equal(got.begin(), got.end(), parts[part].begin()))
              << ranks << " ranks, rank " << r << ", unit " << u << ", part " << part;
        }
      }
    }
  }
}

std::string bytes_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(ShardedCheckpointTest, ConvertsToTheFileOneProcessSaves) {
  const std::string converted = (dir_ / "converted.safetensors").string();
  const std::string direct = (dir_ / "direct.safetensors").string();
  convert_sharded_checkpoint(folder(), converted);
  save_checkpoint(direct, state_, 5, /*with_optimizer=*/true, kRun);
  EXPECT_EQ(bytes_of_file(converted), bytes_of_file(direct));
}

// A snapshot's save, one rank at a time without a communicator: the rank
// whose shard completes the set writes the index, the very file the
// collective save's index is; a shard of another step completes nothing.
TEST_F(ShardedCheckpointTest, SnapshotsWriteTheIndexOnceEveryShardOfTheStepIsInPlace) {
  const ShardLayout layout = make_shard_layout(program_, 3);
  const fs::path step6 = dir_ / "snapshot" / "step-6";
  auto write_rank = [&](int r) {
    const ReplicaShards mine = owned_shards_of(state_, layout, r, /*with_optimizer=*/true);
    return write_shard_and_index_if_complete(step6.string(), mine.shards, 6, kRun,
                                             "snapshot-" + std::to_string(r));
  };
  fs::create_directories(step6);
  fs::copy_file(fs::path(folder()) / shard_file_name(1, 3), step6 / shard_file_name(1, 3));
  EXPECT_FALSE(write_rank(2));
  EXPECT_FALSE(write_rank(0));  // rank 1's file is step 5's
  EXPECT_FALSE(fs::exists(step6 / kShardIndexName));
  // Rank 1's file of step 6, from another run's save: no index either.
  save_as_ranks(state_, 3, (dir_ / "other" / "step-6").string(), 6, kOtherRun);
  fs::copy_file(dir_ / "other" / "step-6" / shard_file_name(1, 3), step6 / shard_file_name(1, 3),
                fs::copy_options::overwrite_existing);
  EXPECT_FALSE(write_rank(0));
  EXPECT_FALSE(fs::exists(step6 / kShardIndexName));
  EXPECT_TRUE(write_rank(1));
  save_as_ranks(state_, 3, (dir_ / "step-6").string(), 6);
  EXPECT_EQ(bytes_of_file((step6 / kShardIndexName).string()),
            bytes_of_file((dir_ / "step-6" / kShardIndexName).string()));
  for (const auto& entry : fs::directory_iterator(step6))
    EXPECT_FALSE(entry.path().string().ends_with(".tmp")) << entry.path();
  EXPECT_EQ(read_checkpoint_info(step6.string()).step, 6);
}

void expect_input_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no InputError, expected one naming " << part;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(ShardedCheckpointTest, BadCheckpointsAreInputErrorsNamingTheProblem) {
  Allocator allocator;
  ModelState loaded(program_, allocator, false);
  auto load = [&] { load_checkpoint(folder(), loaded, true); };
  const fs::path shard = fs::path(folder()) / shard_file_name(1, 3);
  const fs::path index = fs::path(folder()) / kShardIndexName;
  // A shard cut short.
  fs::resize_file(shard, fs::file_size(shard) - 4);
  expect_input_error(load, "the index records");
  // A shard of another save in its place (same size: found by its metadata).
  save_as_ranks(state_, 3, (dir_ / "step-6").string(), 6);
  fs::copy_file(dir_ / "step-6" / shard_file_name(1, 3), shard,
                fs::copy_options::overwrite_existing);
  expect_input_error(load, "a file of another save");
  // The same step's shard from another run's save (another seed, say): the
  // same rank, step and size; its run record tells it apart.
  fill(state_, 8);
  save_as_ranks(state_, 3, (dir_ / "other" / "step-5").string(), 5, kOtherRun);
  fill(state_, 7);
  const fs::path other_shard = dir_ / "other" / "step-5" / shard_file_name(1, 3);
  save_as_ranks(state_, 3, folder(), 5);
  ASSERT_EQ(fs::file_size(other_shard), fs::file_size(shard));
  fs::copy_file(other_shard, shard, fs::copy_options::overwrite_existing);
  expect_input_error(load,
                     "records job.settings_digest = 00000000000000b2 where its save records "
                     "00000000000000a1 (in index.json): a file of another save");
  // Shards that record no run where the index records a settings digest
  // (their run keys stripped), and shards that record a key the save does
  // not: not this save's.
  const std::map<std::string, std::string> none,
      extra = {{"training.steps", "9"},
               {"data.ranks", "3"},
               {"job.settings_digest", "00000000000000a1"},
               {"extra.key", "1"}};
  save_as_ranks(state_, 3, folder(), 5, kRun, &none);
  expect_input_error(load, "records data.ranks = (none) where its save records 3");
  save_as_ranks(state_, 3, folder(), 5, kRun, &extra);
  expect_input_error(load, "records extra.key = 1, which its save does not record");
  // A save from before shards recorded their run (no digest in its index
  // either) loads as it did.
  const std::map<std::string, std::string> before = {{"training.steps", "9"}, {"data.ranks", "3"}};
  save_as_ranks(state_, 3, folder(), 5, before, &none);
  load();
  // A flipped byte in a tensor: its CRC-32C.
  save_as_ranks(state_, 3, folder(), 5);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  expect_input_error(load, "checksum");
  // A missing shard, then no index: an incomplete save.
  fs::remove(shard);
  expect_input_error(load, "is missing");
  fs::remove(index);
  expect_input_error(load, "incomplete sharded checkpoint");
  // Another model's checkpoint.
  save_as_ranks(state_, 2, folder(), 5);
  JobConfig::Model other;
  other.name = "llama3";
  other.dim = 64;
  other.n_heads = 4;
  other.n_kv_heads = 4;
  const Program llama3 = build_model(other, 1, 8).program;
  ModelState wrong(llama3, allocator, false);
  expect_input_error([&] { load_checkpoint(folder(), wrong, false); }, "has no tensor");
  // One shard file where a single-file checkpoint goes: the step folder is
  // named (it said "has no tensor 'tok_embeddings.weight'").
  expect_input_error(
      [&] { load_checkpoint((fs::path(folder()) / shard_file_name(1, 2)).string(), loaded, true); },
      "is one shard of a sharded checkpoint (rank 1 of 2): expected its step folder");
}

}  // namespace
}  // namespace remat
