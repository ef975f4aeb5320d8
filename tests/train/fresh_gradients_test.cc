// Parameter gradients without a memset per step (issue 11): the schedule's
// first writer of each parameter gradient overwrites it (Step::
// fresh_grad_params), later writers accumulate. Training this way gives the
// bits of zeroing every gradient and accumulating, in fp32 and bf16, for
// every AC mode (whose plans order the writers differently), with MoE
// experts that receive no tokens and embedding rows no token reads; after
// the model state is made, no step zeroes a parameter gradient (counted
// through the checking backend, fp32); later
// microbatches accumulate; and a sharded run zeroes only what no step
// writes. Buffers come from storage that fills every allocation with NaN,
// so a gradient byte nobody wrote would show.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ac/policy.h"
#include "ac/schedule.h"
#include "checking_backend.h"
#include "graph/builder.h"
#include "models/registry.h"
#include "runtime/executor.h"
#include "runtime/sharded_state.h"
#include "train/load_balance.h"
#include "train/optimizer.h"

namespace remat {
namespace {

using testing::CheckingBackend;

// Host memory whose every allocation starts as NaN bytes.
class PoisonedStorage final : public Storage {
 public:
  void* allocate(int64_t bytes) override {
    void* p = host_.allocate(bytes);
    std::memset(p, 0xff, static_cast<size_t>(bytes));
    return p;
  }
  void release(void* pointer, int64_t bytes) override { host_.release(pointer, bytes); }

 private:
  HostStorage host_;
};

// llama4's debug model on 4 tokens: at most 4 of its 8 experts get any.
// Two layers (llama4: a dense block, then an MoE block) hold every op kind
// of the six; the time went into initialising, copying and comparing the
// weights, a third of it with two (59 s of the ASan suite's 194 with six).
Program debug_program(const std::string& family, DType dtype) {
  JobConfig::Model model;
  model.name = family;
  model.flavor = "debugmodel";
  model.n_layers = 2;
  const bool moe = family == "llama4";
  Program program = build_model(model, moe ? 1 : 2, moe ? 4 : 16).program;
  set_compute_dtype(program, dtype);
  return program;
}

std::vector<float> to_host(Backend& backend, const Tensor& t) {
  const HostView view(backend, t);
  return std::vector<float>(view.data(), view.data() + t.numel());
}

struct Trained {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<float>> grads;  // every step's, before clipping
  std::vector<std::vector<float>> params;
  int64_t zeroed_gradient_bytes_after_setup = 0;
};

Batch random_batch(const Program& program, std::mt19937& rng, std::vector<int32_t>& inputs,
                   std::vector<int32_t>& targets) {
  inputs.resize(static_cast<size_t>(program.batch * program.seq));
  targets.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<int32_t>(rng() % 256);
    targets[i] = static_cast<int32_t>(rng() % 256);
  }
  return Batch{inputs.data(), targets.data()};
}

// Two steps of the trainer's loop (the second overwrites the first's
// gradients). `zero_each_step`: the old way, every
// gradient zeroed before a run that accumulates into it.
Trained train(const Program& program, const AcOptions& ac, Backend& backend,
              std::unique_ptr<Storage> storage, bool zero_each_step,
              const CheckingBackend* counter = nullptr) {
  Allocator allocator(std::move(storage));
  ModelState state(program, allocator, /*with_gradients=*/true, backend);
  state.initialize(3);
  Executor executor(program, make_schedule(program, make_plan(program, ac), true), allocator,
                    state);
  Trained out;
  if (counter) out.zeroed_gradient_bytes_after_setup = counter->calls().zeroed_gradient_bytes;
  std::mt19937 rng(5);
  std::vector<int32_t> inputs, targets;
  for (int64_t step = 1; step <= 2; ++step) {
    const Batch batch = random_batch(program, rng, inputs, targets);
    if (zero_each_step) {
      state.zero_gradients();
      out.losses.push_back(executor.run(batch, ParamGradients::kAccumulate));
    } else {
      out.losses.push_back(executor.run(batch));
    }
    for (const Tensor& g : state.grads) out.grads.push_back(to_host(backend, g));
    const GradClip clip = clip_grad_norm(state, 1.0);
    out.grad_norms.push_back(clip.norm);
    update_expert_bias(state);
    adamw_step(state, AdamWConfig{}, 1e-3, step, clip.scale);
  }
  for (const Tensor& p : state.params) out.params.push_back(to_host(backend, p));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_bit_identical(const Trained& a, const Trained& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(same_bits(a.grads[i], b.grads[i])) << i;
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(same_bits(a.params[i], b.params[i]));
}

std::vector<AcOptions> modes() {
  std::vector<AcOptions> all;
  for (auto mode :
       {AcOptions::Mode::kNone, AcOptions::Mode::kFull, AcOptions::Mode::kSelectiveOp}) {
    AcOptions o;
    o.mode = mode;
    all.push_back(o);
  }
  return all;
}

int64_t gradient_bytes(const Program& program) {
  int64_t bytes = 0;
  for (const Param& p : program.params) bytes += bytes_of(numel(p.shape), p.dtype);
  return bytes;
}

TEST(FreshGradients, StepsZeroNoParameterGradientAndGiveTheBitsOfZeroedOnes) {
  for (const char* family : {"llama3", "llama4"}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Program program = debug_program(family, dtype);
      for (const AcOptions& ac : modes()) {
        SCOPED_TRACE(std::string(family) + " " + to_string(dtype) + " " + describe(ac));
        const Trained reference = train(program, ac, cpu_backend(), std::make_unique<HostStorage>(),
                                        /*zero_each_step=*/true);
        const Trained fresh = train(program, ac, cpu_backend(), std::make_unique<PoisonedStorage>(),
                                    /*zero_each_step=*/false);
        expect_bit_identical(reference, fresh);
        if (dtype != DType::kF32) continue;  // the checking backend sizes buffers as fp32
        CheckingBackend checking(program);
        const Trained counted = train(program, ac, checking, checking.make_storage(),
                                      /*zero_each_step=*/false, &checking);
        expect_bit_identical(reference, counted);
        // The model state zeroed each gradient once; no step did again.
        EXPECT_EQ(counted.zeroed_gradient_bytes_after_setup, gradient_bytes(program));
        EXPECT_EQ(checking.calls().zeroed_gradient_bytes, gradient_bytes(program));
      }
    }
  }
}

// Shared parameters: one square weight read by two linears in a row, and
// the embedding table tied to the output projection (written first by the
// output's backward, last by the embedding's). Only the schedule's first
// writer of each overwrites; the bits are those of zeroing and accumulating.
TEST(FreshGradients, SharedParametersAreOverwrittenOnceThenAccumulated) {
  const int64_t vocab = 256, dim = 32;
  ProgramBuilder b(/*batch=*/2, /*seq=*/8);
  const ParamInit init{ParamInit::Kind::kNormal, 0.02, 0, 0};
  const ParamId table = b.param("tok_embeddings.weight", {vocab, dim}, init);
  const ParamId norm = b.param("norm.weight", {dim}, ParamInit{ParamInit::Kind::kOnes, 0, 0, 0});
  const ParamId square = b.param("square.weight", {dim, dim}, init);
  ValueId h = b.embedding("tok_embeddings", table);
  b.set_block(0);
  h = b.rmsnorm("layers.0.norm", h, norm, 1e-5f);
  h = b.linear("layers.0.first", h, square);
  h = b.linear("layers.0.second", h, square);
  b.set_block(-1);
  b.cross_entropy("loss", b.linear("output", h, table));
  const Program program = b.finish();
  AcOptions none;
  none.mode = AcOptions::Mode::kNone;
  const Schedule schedule = make_schedule(program, make_plan(program, none), true);
  int first_writers = 0;
  for (const Step& step : schedule.steps) first_writers += std::popcount(step.fresh_grad_params);
  EXPECT_EQ(first_writers, 3);  // one per parameter, though table and square have two writers
  for (const AcOptions& ac : modes()) {
    SCOPED_TRACE(describe(ac));
    expect_bit_identical(
        train(program, ac, cpu_backend(), std::make_unique<HostStorage>(), true),
        train(program, ac, cpu_backend(), std::make_unique<PoisonedStorage>(), false));
  }
}

// The debug models' MoE layers leave experts without tokens on 4 tokens (the
// case the bit-identity above covers): checked here so it cannot go away.
TEST(FreshGradients, TheMoeCaseHasExpertsWithoutTokens) {
  const Program program = debug_program("llama4", DType::kF32);
  Allocator allocator;
  ModelState state(program, allocator, /*with_gradients=*/true);
  state.initialize(3);
  Executor executor(program, make_schedule(program, make_plan(program, AcOptions{}), true),
                    allocator, state);
  std::mt19937 rng(5);
  std::vector<int32_t> inputs, targets;
  executor.run(random_batch(program, rng, inputs, targets));
  int empty = 0;
  for (Tensor* counts : expert_counts(state)) {
    const std::vector<float> host = to_host(cpu_backend(), *counts);
    for (float c : host) empty += c == 0.0f;
  }
  EXPECT_GT(empty, 0);
}

// Microbatches: the first run's first writers overwrite, later runs add.
TEST(FreshGradients, LaterMicrobatchesAccumulate) {
  for (const char* family : {"llama3", "llama4"}) {
    SCOPED_TRACE(family);
    const Program program = debug_program(family, DType::kF32);
    std::vector<std::vector<float>> grads[2];
    for (int zeroed = 0; zeroed < 2; ++zeroed) {
      Allocator allocator(std::make_unique<PoisonedStorage>());
      ModelState state(program, allocator, /*with_gradients=*/true);
      state.initialize(3);
      Executor executor(program, make_schedule(program, make_plan(program, AcOptions{}), true),
                        allocator, state);
      std::mt19937 rng(5);
      std::vector<int32_t> inputs, targets;
      for (int step = 0; step < 2; ++step) {  // the second step overwrites the first's
        if (zeroed) state.zero_gradients();
        for (int micro = 0; micro < 3; ++micro) {
          const bool first = micro == 0 && !zeroed;
          executor.run(random_batch(program, rng, inputs, targets),
                       first ? ParamGradients::kOverwrite : ParamGradients::kAccumulate);
        }
      }
      for (const Tensor& g : state.grads) grads[zeroed].push_back(to_host(cpu_backend(), g));
    }
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(same_bits(grads[0][i], grads[1][i]));
  }
}

// One rank (collectives are copies, as in tests/runtime/sharded_state_test):
// the shards get the unsharded gradients, and zeros where no step writes
// (the MoE buffers' ranges), from full gradients that start as NaN bytes.
class OneRank final : public UnitCollectives {
 public:
  void start_gather(size_t, const Tensor& shard, Tensor& gathered) override {
    std::memcpy(gathered.raw(), shard.raw(), static_cast<size_t>(shard.bytes()));
  }
  void wait_gather(size_t) override {}
  void start_reduce_scatter(size_t, const Tensor& full, Tensor& shard) override {
    std::memcpy(shard.raw(), full.raw(), static_cast<size_t>(shard.bytes()));
  }
  void wait_reduce_scatter(size_t) override {}
  void progress() override {}
};

TEST(FreshGradients, ShardedRunsZeroOnlyWhatNoStepWrites) {
  for (const char* family : {"llama3", "llama4"}) {
    const Program program = debug_program(family, DType::kF32);
    for (const AcOptions& ac : modes()) {
      SCOPED_TRACE(std::string(family) + " " + describe(ac));
      const Plan plan = make_plan(program, ac);
      std::mt19937 rng(5);
      std::vector<int32_t> inputs, targets;
      const Batch batch = random_batch(program, rng, inputs, targets);
      Allocator plain_books;
      ModelState plain(program, plain_books, true);
      plain.initialize(3);
      Executor(program, make_schedule(program, plan, true), plain_books, plain).run(batch);

      Allocator books(std::make_unique<PoisonedStorage>());
      ModelState buffers(program, books, true, cpu_backend(), Holds::kBuffersOnly);
      buffers.initialize(3);
      Executor run(program, make_schedule(program, plan, true), books, buffers);
      ShardedState sharded(buffers, run.schedule(), 1, 0);
      sharded.initialize(3);
      OneRank collectives;
      sharded.set_collectives(&collectives);
      run.set_param_source(&sharded);
      EXPECT_THROW(run.run(batch, ParamGradients::kAccumulate), std::logic_error);
      for (int step = 0; step < 2; ++step) run.run(batch);  // the second on reused buffers
      const ShardLayout& layout = sharded.layout();
      for (size_t u = 0; u < layout.units.size(); ++u) {
        const std::vector<float> shard = to_host(cpu_backend(), sharded.grads[u]);
        for (size_t i = 0; i < layout.units[u].params.size(); ++i) {
          const ParamId p = layout.units[u].params[i];
          std::vector<float> want(static_cast<size_t>(numel(program.params[p].shape)), 0.0f);
          if (program.params[p].trainable) want = to_host(cpu_backend(), plain.grads[p]);
          const auto begin = shard.begin() + layout.units[u].offsets[i];
          EXPECT_TRUE(same_bits(std::vector<float>(begin, begin + want.size()), want))
              << program.params[p].fqn;
        }
      }
    }
  }
}

}  // namespace
}  // namespace remat
