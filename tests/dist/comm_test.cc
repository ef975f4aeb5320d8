// The communicator's contracts (dist/comm.h). ctest runs this binary twice:
// alone (the single-process communicator) and under `mpirun -np 2` (Open
// MPI), where every rank runs every test; the expected values are written
// for any size().
#include "dist/comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace remat {
namespace {

// A value no two ranks or elements share, so a misplaced chunk shows (no
// multiply-add, which the compiler may fuse in one place and not another).
float contribution(int rank, int64_t i) {
  return static_cast<float>(i) + 1.0f / static_cast<float>(3 + 7 * rank + static_cast<int>(i % 11));
}

// The rank-ordered sum the contract promises, written out.
float ordered_sum(int ranks, int64_t i) {
  float total = contribution(0, i);
  for (int r = 1; r < ranks; ++r) total += contribution(r, i);
  return total;
}

TEST(Comm, AllreduceIsTheRankOrderedSumOnEveryRank) {
  Communicator& comm = world();
  for (int64_t n : {1, 2, 5, 1000, 4097}) {  // sizes that do and do not divide
    std::vector<float> data(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) data[static_cast<size_t>(i)] = contribution(comm.rank(), i);
    comm.allreduce_sum(data.data(), n, "test all-reduce");
    for (int64_t i = 0; i < n; ++i) {
      const float expected = ordered_sum(comm.size(), i);
      ASSERT_EQ(std::memcmp(&data[static_cast<size_t>(i)], &expected, sizeof(float)), 0)
          << "n " << n << " element " << i;
    }
  }
}

// A split communicator is an MPI job of its own among the ranks of one
// colour: ranked in world order, its collectives summing only them.
TEST(Comm, SplitGroupsTheRanksOfOneColour) {
  Communicator& comm = world();
  const int color = comm.rank() % 2;
  const std::unique_ptr<Communicator> part = comm.split(color);
  const int members = (comm.size() - color + 1) / 2;  // ranks color, color + 2, ...
  ASSERT_EQ(part->size(), members);
  EXPECT_EQ(part->rank(), comm.rank() / 2);
  EXPECT_EQ(part->timeout(), comm.timeout());
  std::vector<float> data = {static_cast<float>(comm.rank()), 1.0f};
  part->allreduce_sum(data.data(), 2, "test all-reduce of a split");
  float ranks = 0;
  for (int r = color; r < comm.size(); r += 2) ranks += static_cast<float>(r);
  EXPECT_EQ(data[0], ranks);
  EXPECT_EQ(data[1], static_cast<float>(members));
}

// Many all-reduces in flight, driven together while the ranks' timing
// differs (as the trainer's per-block all-reduces are): their reduce-scatters
// finish in any order, yet each rank must start their all-gathers in one
// order, and every result is still the rank-ordered sum.
TEST(Comm, AllreducesInFlightCompleteWhateverTheTiming) {
  Communicator& comm = world();
  std::vector<std::vector<float>> buffers;
  std::vector<std::unique_ptr<CommRequest>> requests;
  for (int k = 0; k < 24; ++k) {
    const int64_t n = 1 + (k * 7919) % 5000;  // sizes that do and do not divide
    buffers.emplace_back(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      buffers.back()[static_cast<size_t>(i)] = contribution(comm.rank(), i + k);
    requests.push_back(comm.start_allreduce_sum(buffers.back().data(), n, "test all-reduce"));
    // Rank 1 falls behind now and then: rank 0 sees other completions first.
    if (comm.rank() == 1 && k % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (bool all_done = false; !all_done;) {
    all_done = true;
    for (int k = static_cast<int>(requests.size()) - 1; k >= 0; --k)  // latest first
      all_done = requests[static_cast<size_t>(k)]->poll() && all_done;
  }
  for (size_t k = 0; k < buffers.size(); ++k)
    for (size_t i = 0; i < buffers[k].size(); ++i)
      ASSERT_EQ(buffers[k][i], ordered_sum(comm.size(), static_cast<int64_t>(i + k)))
          << "all-reduce " << k << " element " << i;
}

TEST(Comm, ReduceScatterGivesEachRankItsChunk) {
  Communicator& comm = world();
  const int64_t chunk = 3;
  std::vector<float> in(static_cast<size_t>(chunk * comm.size()));
  for (size_t i = 0; i < in.size(); ++i) in[i] = contribution(comm.rank(), static_cast<int64_t>(i));
  std::vector<float> out(chunk);
  comm.start_reduce_scatter(in.data(), out.data(), chunk, "test reduce-scatter")->wait();
  for (int64_t i = 0; i < chunk; ++i)
    EXPECT_EQ(out[static_cast<size_t>(i)], ordered_sum(comm.size(), comm.rank() * chunk + i));
}

TEST(Comm, AllGatherAndScalarsAreInRankOrder) {
  Communicator& comm = world();
  const std::vector<int64_t> ranks = comm.all_gather<int64_t>(10 * comm.rank(), "test gather");
  ASSERT_EQ(static_cast<int>(ranks.size()), comm.size());
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)], 10 * r);
  EXPECT_EQ(comm.min(5 + comm.rank(), "test min"), 5);
  EXPECT_EQ(comm.max(5 + comm.rank(), "test max"), 5 + comm.size() - 1);
  double expected = 0;
  for (int r = 0; r < comm.size(); ++r) expected += 0.1 * (r + 1);
  EXPECT_EQ(comm.sum(0.1 * (comm.rank() + 1), "test sum"), expected);
  comm.barrier("test barrier");
}

TEST(Comm, WaitsCountTowardsWaitSeconds) {
  Communicator& comm = world();
  const double before = comm.wait_seconds();
  // Rank 0 arrives late: every other rank waits for it.
  if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comm.barrier("test barrier");
  if (comm.size() > 1 && comm.rank() > 0) {
    EXPECT_GE(comm.wait_seconds() - before, 0.03);
  }
  EXPECT_GE(comm.wait_seconds(), before);
}

TEST(Comm, ConfirmedInputsAreRemembered) {
  Communicator& comm = world();
  confirm_inputs(comm);  // every rank's inputs are fine here
  EXPECT_TRUE(comm.inputs_confirmed());
}

// A rank given another config ran collectives that no longer matched its
// peers' (crashes, a silent exit, a false "interrupted"): the first
// agreement compares the settings, and every rank names the first that
// differs.
TEST(Comm, RanksGivenDifferentSettingsAreNamed) {
  Communicator& comm = world();
  const RankSettings same = {{"model.dim", "64"}, {"training.steps", "2"}, {"job.x", "y"}};
  EXPECT_NO_THROW(agree_on_settings(comm, same));
  RankSettings mine = same;
  const int odd = comm.size() - 1;  // the rank given another value
  if (comm.rank() == odd) mine[1].second = "4";
  if (comm.size() == 1) {
    EXPECT_NO_THROW(agree_on_settings(comm, mine));  // one rank agrees with itself
    return;
  }
  std::string said;
  try {
    agree_on_settings(comm, mine);
  } catch (const RanksDisagree& e) {
    said = e.what();
  }
  std::string others = std::to_string(odd);  // as the other ranks see it
  if (comm.rank() == odd) {
    others.clear();
    for (int r = 0; r < odd; ++r) others += (others.empty() ? "" : ", ") + std::to_string(r);
  }
  EXPECT_NE(said.find("training.steps = " + mine[1].second + " on rank " +
                      std::to_string(comm.rank()) + ", another value on rank(s) " + others),
            std::string::npos)
      << said;
  // Another number of settings (builds with other keys): said without a
  // second collective, on every rank.
  RankSettings more = same;
  if (comm.rank() == odd) more.emplace_back("new.key", "1");
  said.clear();
  try {
    agree_on_settings(comm, more);
  } catch (const RanksDisagree& e) {
    said = e.what();
  }
  EXPECT_NE(said.find("different config keys"), std::string::npos) << said;
  EXPECT_NO_THROW(agree_on_settings(comm, same));  // and the ranks still agree afterwards
}

TEST(Comm, SizeIsTheLaunchersRankCount) {
  Communicator& comm = world();
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(comm.launched_by_mpi(), size != nullptr);
  EXPECT_EQ(comm.size(), size ? std::atoi(size) : 1);
  EXPECT_LT(comm.rank(), comm.size());
}

}  // namespace
}  // namespace remat
