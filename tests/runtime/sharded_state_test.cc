// The sharded state's gathers and reduce-scatters: with one rank (every
// collective a copy) a sharded run computes the unsharded run's loss and
// gradients bit for bit in every AC mode, each parameter read from its
// gathered unit; with more ranks every collective started is waited for,
// each block is gathered for its forward and again for its backward, and one
// gather (the next block's, prefetched) is in flight while a block computes.
#include "runtime/sharded_state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "ac/policy.h"
#include "kernels/cpu/kernels.h"
#include "models/llama3.h"
#include "models/llama4.h"

namespace remat {
namespace {

// One rank: gathering and reduce-scattering are copies. Records the
// collectives in flight and the most blocks gathered at once.
class OneProcess final : public UnitCollectives {
 public:
  void start_gather(size_t id, const Tensor& shard, Tensor& gathered) override {
    if (shard.raw() && gathered.raw())
      std::memcpy(gathered.raw(), shard.raw(), static_cast<size_t>(shard.bytes()));
    EXPECT_TRUE(gathers.emplace(id, true).second) << "gather " << id << " started twice";
    ++gathers_started;
  }
  void wait_gather(size_t id) override { EXPECT_EQ(gathers.erase(id), 1u) << id; }
  void start_reduce_scatter(size_t id, const Tensor& full, Tensor& shard) override {
    if (full.raw() && shard.raw())
      std::memcpy(shard.raw(), full.raw(), static_cast<size_t>(shard.bytes()));
    EXPECT_TRUE(scatters.emplace(id, true).second) << "reduce-scatter " << id << " twice";
    ++scatters_started;
  }
  void wait_reduce_scatter(size_t id) override { EXPECT_EQ(scatters.erase(id), 1u) << id; }
  void progress() override {}

  std::map<size_t, bool> gathers, scatters;  // in flight
  int gathers_started = 0, scatters_started = 0;
};

std::vector<AcOptions> modes() {
  std::vector<AcOptions> all;
  AcOptions o;
  for (auto mode : {AcOptions::Mode::kNone, AcOptions::Mode::kFull,
                    AcOptions::Mode::kSelectiveLayer, AcOptions::Mode::kSelectiveOp}) {
    o.mode = mode;
    o.layer_frequency = 2;
    all.push_back(o);
  }
  return all;
}

std::vector<Program> programs() {
  TransformerArgs args;
  args.dim = 64;
  args.n_layers = 3;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 301;
  args.multiple_of = 32;
  Llama4Args moe;
  moe.base = args;
  moe.base.n_layers = 2;
  moe.num_experts = 4;
  moe.top_k = 2;
  return {build_llama3_program(args, 2, 16), build_llama4_program(moe, 2, 16)};
}

struct Tokens {
  std::vector<int32_t> inputs, targets;
};

Tokens random_tokens(int64_t n, int64_t vocab) {
  std::mt19937 rng(7);
  Tokens t;
  for (int64_t i = 0; i < n; ++i) {
    t.inputs.push_back(static_cast<int32_t>(rng() % vocab));
    t.targets.push_back(static_cast<int32_t>(rng() % vocab));
  }
  return t;
}

TEST(ShardedState, OneRankComputesTheUnshardedLossAndGradients) {
  cpu::set_num_threads(2);
  for (const Program& program : programs()) {
    const Tokens tokens = random_tokens(program.batch * program.seq, 301);
    const Batch batch{tokens.inputs.data(), tokens.targets.data()};
    for (const AcOptions& mode : modes()) {
      SCOPED_TRACE(describe(mode));
      const Plan plan = make_plan(program, mode);
      Allocator plain_books;
      ModelState plain(program, plain_books, true);
      plain.initialize(5);
      Executor plain_run(program, make_schedule(program, plan, true), plain_books, plain);
      const double want = plain_run.run(batch);

      Allocator books;
      ModelState buffers(program, books, true, cpu_backend(), Holds::kBuffersOnly);
      buffers.initialize(5);
      Executor run(program, make_schedule(program, plan, true), books, buffers);
      ShardedState sharded(buffers, run.schedule(), 1, 0);
      sharded.initialize(5);
      OneProcess collectives;
      sharded.set_collectives(&collectives);
      run.set_param_source(&sharded);
      const double got = run.run(batch);
      EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << got << " vs " << want;
      EXPECT_TRUE(collectives.gathers.empty() && collectives.scatters.empty());
      const ShardLayout& layout = sharded.layout();
      for (size_t u = 0; u < layout.units.size(); ++u) {
        for (size_t i = 0; i < layout.units[u].params.size(); ++i) {
          const ParamId p = layout.units[u].params[i];
          if (!program.params[p].trainable) continue;
          const Tensor& g = plain.grads[p];
          EXPECT_EQ(std::memcmp(sharded.grads[u].data() + layout.units[u].offsets[i], g.data(),
                                static_cast<size_t>(g.bytes())),
                    0)
              << program.params[p].fqn;
        }
      }
    }
  }
}

TEST(ShardedState, EveryCollectiveIsWaitedForAndTheNextBlockIsPrefetched) {
  for (const Program& program : programs()) {
    for (const AcOptions& mode : modes()) {
      SCOPED_TRACE(describe(mode));
      Allocator books(/*counting_only=*/true);
      ModelState buffers(program, books, true, cpu_backend(), Holds::kBuffersOnly);
      Executor run(program, make_schedule(program, make_plan(program, mode), true), books, buffers);
      ShardedState sharded(buffers, run.schedule(), 3, 1);
      OneProcess collectives;
      sharded.set_collectives(&collectives);
      run.set_param_source(&sharded);
      int64_t most_gathered = 0;
      books.set_listener([&](const MemorySnapshot&) {
        most_gathered = std::max<int64_t>(most_gathered, collectives.gathers.size());
      });
      books.reset_peak();
      run.run(Batch{});
      books.set_listener(nullptr);
      EXPECT_TRUE(collectives.gathers.empty() && collectives.scatters.empty());
      const int blocks = program.n_blocks;
      EXPECT_EQ(collectives.gathers_started, 1 + 2 * blocks);
      EXPECT_EQ(collectives.scatters_started, 1 + blocks);
      // One gather is in flight while a stretch computes: the next block's.
      EXPECT_EQ(most_gathered, 1);
    }
  }
}

}  // namespace
}  // namespace remat
