// The executor follows the plan: every AC mode gives bit-identical gradients,
// the backward pass re-runs exactly the ops the plan names, values die when
// the schedule says, and a dry run books exactly what a real run allocates.
#include "runtime/executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>

#include "ac/policy.h"
#include "in_place_steps.h"
#include "kernels/cpu/kernels.h"
#include "models/llama3.h"

namespace remat {
namespace {

TransformerArgs gqa_args() {
  TransformerArgs args;
  args.dim = 64;
  args.n_layers = 3;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 300;
  args.multiple_of = 32;
  return args;
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

std::vector<AcOptions> all_modes(const Program& p) {
  std::vector<AcOptions> modes;
  AcOptions o;
  o.mode = AcOptions::Mode::kNone;
  modes.push_back(o);
  o.mode = AcOptions::Mode::kFull;
  modes.push_back(o);
  for (int64_t n : {1, 2, 3}) {
    o.mode = AcOptions::Mode::kSelectiveLayer;
    o.layer_frequency = n;
    modes.push_back(o);
  }
  int64_t smallest = INT64_MAX, largest = 0;
  for (const Node& n : p.nodes) {
    if (op_info(n.kind).op_class == OpClass::kMatmul) {
      smallest = std::min(smallest, forward_flops(n));
      largest = std::max(largest, forward_flops(n));
    }
  }
  o.mode = AcOptions::Mode::kSelectiveOp;
  for (double threshold : {0.0, 1e50, (static_cast<double>(smallest) + largest) / 2}) {
    o.mm_flops_threshold = threshold;
    o.force_recompute_fqns = {};
    modes.push_back(o);
  }
  o.mm_flops_threshold = 0;
  o.force_recompute_fqns = {"attention.wk"};
  modes.push_back(o);
  return modes;
}

struct RunResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;
  ExecutionCounts counts;
  MemorySnapshot at_peak;
  int64_t peak = 0;
  std::string peak_label;
  MemorySnapshot after;
};

RunResult run_once(const Program& p, const Plan& plan, const Tokens& tokens, bool dry) {
  Allocator allocator(dry);
  ModelState state(p, allocator, true);
  state.initialize(3);
  Executor ex(p, make_schedule(p, plan, true), allocator, state);
  allocator.reset_peak();
  RunResult r;
  r.loss = ex.run(Batch{tokens.inputs.data(), tokens.targets.data()});
  r.counts = ex.counts();
  r.at_peak = allocator.at_peak();
  r.peak = allocator.peak();
  r.peak_label = allocator.peak_label();
  r.after = allocator.current();
  if (!dry) {
    for (const Tensor& g : state.grads) r.grads.emplace_back(g.data(), g.data() + g.numel());
  }
  return r;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::set_num_threads(2); }
  Program program = build_llama3_program(gqa_args(), 2, 24);
  Tokens tokens = random_tokens(2 * 24, 300);
};

TEST_F(ExecutorTest, EveryModeGivesBitIdenticalLossAndGradients) {
  const auto modes = all_modes(program);
  RunResult reference = run_once(program, make_plan(program, modes[0]), tokens, false);
  ASSERT_GT(reference.loss, 1.0);
  for (size_t m = 1; m < modes.size(); ++m) {
    RunResult r = run_once(program, make_plan(program, modes[m]), tokens, false);
    SCOPED_TRACE(describe(modes[m]));
    EXPECT_EQ(std::memcmp(&r.loss, &reference.loss, sizeof(double)), 0);
    ASSERT_EQ(r.grads.size(), reference.grads.size());
    for (size_t i = 0; i < r.grads.size(); ++i) {
      ASSERT_EQ(std::memcmp(r.grads[i].data(), reference.grads[i].data(),
                            r.grads[i].size() * sizeof(float)),
                0)
          << program.params[i].fqn;
    }
  }
}

TEST_F(ExecutorTest, BackwardRerunsExactlyThePlannedOps) {
  for (const AcOptions& mode : all_modes(program)) {
    SCOPED_TRACE(describe(mode));
    Plan plan = make_plan(program, mode);
    RunResult r = run_once(program, plan, tokens, false);
    std::vector<int32_t> planned;
    for (int32_t n = 0; n < static_cast<int32_t>(plan.recompute.size()); ++n) {
      if (plan.recompute[n]) planned.push_back(n);
    }
    std::vector<int32_t> ran = r.counts.recomputed_nodes;
    std::sort(ran.begin(), ran.end());
    EXPECT_EQ(ran, planned);
    EXPECT_EQ(r.counts.recompute_matmuls, plan.recomputed_matmuls(program));
    EXPECT_EQ(r.counts.recompute_flops, plan.recompute_flops(program));
    EXPECT_EQ(r.counts.backward_ops, static_cast<int64_t>(program.nodes.size()));
  }
}

TEST_F(ExecutorTest, OpAcDoesNotRerunWhatNobodyNeeds) {
  AcOptions op;
  op.mode = AcOptions::Mode::kSelectiveOp;
  op.force_recompute_fqns = {};
  RunResult r = run_once(program, make_plan(program, op), tokens, false);
  for (int32_t n : r.counts.recomputed_nodes) {
    const std::string& fqn = program.nodes[n].fqn;
    // w2's output only feeds the residual add (whose backward reads nothing)
    // and the attention core is kept: neither may be re-run.
    EXPECT_EQ(fqn.find("feed_forward.w2"), std::string::npos) << fqn;
    EXPECT_EQ(fqn.find("attention.sdpa"), std::string::npos) << fqn;
    EXPECT_EQ(fqn.find("ffn_residual"), std::string::npos) << fqn;
  }
  // Per block: wk, wo and w3 are re-run (alternation), nothing else matmul.
  EXPECT_EQ(r.counts.recompute_matmuls, 3 * 3);
}

TEST_F(ExecutorTest, EverythingIsFreedAfterTheStep) {
  for (const AcOptions& mode : all_modes(program)) {
    RunResult r = run_once(program, make_plan(program, mode), tokens, false);
    EXPECT_EQ(r.after[MemoryCategory::kTemporaries], 0) << describe(mode);
    EXPECT_EQ(r.after[MemoryCategory::kActivations], 4) << describe(mode);  // the loss
  }
}

TEST_F(ExecutorTest, DryRunBooksExactlyWhatARealRunAllocates) {
  for (const AcOptions& mode : all_modes(program)) {
    SCOPED_TRACE(describe(mode));
    Plan plan = make_plan(program, mode);
    RunResult real = run_once(program, plan, tokens, false);
    RunResult dry = run_once(program, plan, tokens, true);
    EXPECT_EQ(real.peak, dry.peak);
    EXPECT_EQ(real.at_peak.bytes, dry.at_peak.bytes);
    EXPECT_EQ(real.peak_label, dry.peak_label);
    EXPECT_FALSE(real.peak_label.empty());
  }
}

// A residual add's backward hands its output's gradient buffer to its first
// input (OpInfo::grad_output_becomes_input_grad): its step books one new
// gradient (the other input's), not two, in every mode, and the budget
// solver's simulation (tests/planner/budget_test.cc) books the same.
TEST_F(ExecutorTest, AnAddsBackwardBooksOneGradientNotTwo) {
  for (const AcOptions& mode : all_modes(program)) {
    SCOPED_TRACE(describe(mode));
    Allocator allocator;
    ModelState state(program, allocator, true);
    state.initialize(3);
    Executor ex(program, make_schedule(program, make_plan(program, mode), true), allocator, state);
    const Step* current = nullptr;
    ex.set_step_observer([&](const Step& step) { current = &step; });
    std::map<int32_t, std::vector<int64_t>> add_allocations;  // node -> bytes booked
    int64_t temporaries = 0;
    allocator.set_listener([&](const MemorySnapshot& now) {
      const int64_t level = now[MemoryCategory::kTemporaries];
      if (current != nullptr && current->kind == Step::Kind::kBackward &&
          program.nodes[current->node].kind == OpKind::kAdd && level > temporaries) {
        add_allocations[current->node].push_back(level - temporaries);
      }
      temporaries = level;
    });
    ex.run(Batch{tokens.inputs.data(), tokens.targets.data()});
    allocator.set_listener({});
    ASSERT_EQ(add_allocations.size(), 2 * static_cast<size_t>(program.n_blocks));
    for (const auto& [node, booked] : add_allocations) {
      const Value& out = program.values[program.nodes[node].outputs[0]];
      EXPECT_EQ(booked, std::vector<int64_t>{bytes_of(numel(out.shape), DType::kF32)})
          << program.nodes[node].fqn;
    }
  }
}

// Inputs that die at their reader's backward become their own gradients
// (OpInfo::grads_over_saved_inputs) in every mode: the SwiGLU gate's a and b
// (w1's and w3's outputs) and w2's input (read by nothing else); not wo's,
// which attention's backward reads after. Those steps book no new byte.
TEST_F(ExecutorTest, DyingInputsBecomeTheirGradientsAndBookNothing) {
  const std::map<std::string, uint32_t> expected = {{"feed_forward.silu_mul", 0b11},
                                                    {"feed_forward.w2", 0b1}};
  for (const AcOptions& mode : all_modes(program)) {
    SCOPED_TRACE(describe(mode));
    const Schedule schedule = make_schedule(program, make_plan(program, mode), true);
    EXPECT_EQ(expect_marked_inputs(program, schedule, expected), 2 * program.n_blocks);
    EXPECT_EQ(booked_by_in_place_steps(program, schedule,
                                       Batch{tokens.inputs.data(), tokens.targets.data()}),
              0);
  }
}

TEST_F(ExecutorTest, PeakMemoryOrdersByMode) {
  auto peak = [&](AcOptions o) {
    return run_once(program, make_plan(program, o), tokens, true).peak;
  };
  AcOptions none, full, op0, op50;
  none.mode = AcOptions::Mode::kNone;
  full.mode = AcOptions::Mode::kFull;
  op0.mode = op50.mode = AcOptions::Mode::kSelectiveOp;
  op50.mm_flops_threshold = 1e50;
  EXPECT_GE(peak(none), peak(op0));
  EXPECT_GE(peak(op0), peak(op50));
  EXPECT_GE(peak(op50), peak(full));
  EXPECT_GT(peak(none), peak(full));
}

TEST_F(ExecutorTest, ForwardOnlyScheduleKeepsNothing) {
  Allocator allocator;
  ModelState state(program, allocator, false);
  state.initialize(3);
  const Plan plan = make_inference_plan(program);
  Executor ex(program, make_schedule(program, plan, false), allocator, state);
  const double loss = ex.run(Batch{tokens.inputs.data(), tokens.targets.data()});
  RunResult train = run_once(program, make_plan(program, AcOptions{}), tokens, false);
  EXPECT_EQ(loss, train.loss);
  EXPECT_EQ(allocator.current()[MemoryCategory::kActivations], 0);
  EXPECT_EQ(allocator.current()[MemoryCategory::kTemporaries], 4);  // the loss
}

}  // namespace
}  // namespace remat
