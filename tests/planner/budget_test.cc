// The budget solver (issue: memory_budget) against the replay it must agree
// with: its peak model equals the planner's replay for random choices, its
// answers are optimal by brute force on small programs, and its peak and
// cost move the right way as the budget falls.
#include "ac/budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>

#include "graph/builder.h"
#include "models/registry.h"
#include "planner/planner.h"
#include "runtime/executor.h"

namespace remat {
namespace {

JobConfig::Model llama3_debug() { return JobConfig::Model{}; }
JobConfig::Model llama4_debug() {
  JobConfig::Model m;
  m.name = "llama4";
  return m;
}
JobConfig::Model wide() {
  JobConfig::Model m;
  m.dim = 1024;
  m.n_layers = 8;
  m.n_heads = 16;
  m.n_kv_heads = 16;
  return m;
}

double flops(const Node& node) { return static_cast<double>(forward_flops(node)); }

BudgetProblem problem_for(const Program& program, const PlannerOptions& options,
                          const std::vector<bool>& decidable = {}) {
  const Plan reference = make_reference_plan(program);
  const Schedule schedule = make_schedule(program, reference, true);
  return make_budget_problem(program, schedule, replay_levels(program, reference, options),
                             step_bookings(program, cpu_backend()), booking_scale(program, options),
                             flops, decidable);
}

struct Case {
  const char* name;
  JobConfig::Model model;
  int64_t batch, seq;
  PlannerOptions options;
  // The CPU engine's bf16 mixed precision: the program carries bf16
  // activations and the executor books its weight copies and staging.
  bool bf16_program = false;
};

std::vector<Case> cases() {
  PlannerOptions fsdp;
  fsdp.shard_degree = 4;
  fsdp.bf16_compute = true;
  PlannerOptions bf16;
  bf16.bf16_compute = true;
  return {{"llama3 debug", llama3_debug(), 2, 64, {}},
          {"llama4 debug", llama4_debug(), 2, 64, {}},
          {"wide", wide(), 1, 128, {}},
          {"llama4 debug bf16 fsdp", llama4_debug(), 2, 64, fsdp},
          {"llama3 debug bf16", llama3_debug(), 2, 64, bf16, true},
          {"llama4 debug bf16", llama4_debug(), 2, 64, bf16, true}};
}

Program program_of(const Case& c) {
  Program program = build_model(c.model, c.batch, c.seq).program;
  if (c.bf16_program) set_compute_dtype(program, DType::kBF16);
  return program;
}

TEST(BudgetModel, PeakEqualsReplayForRandomChoices) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    const Program program = program_of(c);
    const BudgetProblem pb = problem_for(program, c.options);
    for (int trial = 0; trial < 25; ++trial) {
      std::vector<int32_t> option(pb.blocks.size());
      for (size_t b = 0; b < option.size(); ++b) {
        const auto& opts = pb.options[pb.block_class[b]];
        option[b] = std::uniform_int_distribution<int32_t>(0, opts.size() - 1)(rng);
      }
      BudgetChoice choice;
      choice.option = option;
      const Plan plan = plan_from_choice(pb, choice);
      const Prediction p = predict(program, plan, c.options);
      ASSERT_EQ(peak_of(pb, option), p.peak_bytes) << c.name << " trial " << trial;
      ASSERT_DOUBLE_EQ(cost_of(pb, option), static_cast<double>(p.recompute_flops)) << c.name;
    }
  }
}

const ParamInit kInit{ParamInit::Kind::kNormal, 0.02, 0, 0};
const ParamInit kOnes{ParamInit::Kind::kOnes, 0, 0, 0};

// Three blocks of `block(builder, "layers.i.", h) -> h` between an
// embedding and a loss head, both `dim` wide over a vocabulary of 16.
Program three_blocks(
    int64_t dim, int64_t seq,
    const std::function<ValueId(ProgramBuilder&, const std::string&, ValueId)>& block) {
  const int64_t vocab = 16;
  ProgramBuilder b(/*batch=*/2, seq);
  ValueId h = b.embedding("tok_embeddings", b.param("tok_embeddings.weight", {vocab, dim}, kInit));
  for (int32_t layer = 0; layer < 3; ++layer) {
    b.set_block(layer);
    h = block(b, "layers." + std::to_string(layer) + ".", h);
  }
  b.set_block(-1);
  b.cross_entropy("loss", b.linear("output", h, b.param("output.weight", {vocab, dim}, kInit)));
  return b.finish();
}

// For every choice the blocks can make (each block the same), the solver's
// peak equals the replay's.
void expect_peak_equals_replay_for_every_option(const Program& program) {
  const BudgetProblem pb = problem_for(program, {});
  for (size_t o = 0; o < pb.options[pb.block_class[0]].size(); ++o) {
    const std::vector<int32_t> option(pb.blocks.size(), static_cast<int32_t>(o));
    BudgetChoice choice;
    choice.option = option;
    const Prediction p = predict(program, plan_from_choice(pb, choice), {});
    EXPECT_EQ(peak_of(pb, option), p.peak_bytes)
        << "option " << o << ", peak during " << p.peak_during;
  }
}

// Blocks whose backward peaks at a residual add's step, where the add hands
// its output's gradient to an input (OpInfo::grad_output_becomes_input_grad):
// x + linear(norm(x)) + norm(x). The simulation books that step as the
// executor does, for every choice of every block.
TEST(BudgetModel, PeakEqualsReplayWhereAnAddsBackwardPeaks) {
  const int64_t dim = 64;
  expect_peak_equals_replay_for_every_option(
      three_blocks(dim, /*seq=*/8, [&](ProgramBuilder& b, const std::string& at, ValueId h) {
        const ValueId n =
            b.rmsnorm(at + "norm", h, b.param(at + "norm.weight", {dim}, kOnes), 1e-5f);
        const ValueId y = b.linear(at + "proj", n, b.param(at + "proj.weight", {dim, dim}, kInit));
        return b.add(at + "add_norm", b.add(at + "add_proj", h, y), n);
      }));
}

// Blocks of routed experts with a narrow model dimension, so that the
// route's indices and the dispatch's offsets and perm are as large as the
// activations around them: none of them gets a gradient (carries_gradient),
// and the simulation books none, as the executor does, for every choice.
TEST(BudgetModel, PeakEqualsReplayWhereRoutingIndicesGetNoGradient) {
  const int64_t dim = 2, experts = 4, top_k = 2;
  expect_peak_equals_replay_for_every_option(
      three_blocks(dim, /*seq=*/64, [&](ProgramBuilder& b, const std::string& layer, ValueId h) {
        const std::string at = layer + "moe.";
        const ValueId n =
            b.rmsnorm(at + "norm", h, b.param(at + "norm.weight", {dim}, kOnes), 1e-5f);
        const ValueId logits = b.linear(at + "router.gate", n,
                                        b.param(at + "router.gate.weight", {experts, dim}, kInit));
        const auto [scores, indices] =
            b.moe_route(at + "router", logits, b.buffer(at + "expert_bias", {experts}),
                        b.buffer(at + "tokens_per_expert", {experts}), top_k, false);
        const MoeDispatched d = b.moe_dispatch(at + "dispatch", n, scores, indices, experts);
        const ValueId rows =
            b.grouped_linear(at + "experts.w1", d.rows, d.offsets,
                             b.param(at + "experts.w1", {experts, dim, dim}, kInit));
        return b.add(at + "add", h, b.moe_combine(at + "combine", rows, d.perm, top_k));
      }));
}

// A tiny Llama 3 (GQA, 2 or 3 blocks) for brute force.
Program tiny(int64_t layers) {
  JobConfig::Model m;
  m.dim = 64;
  m.n_layers = layers;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.vocab_size = 300;
  m.multiple_of = 32;
  return build_model(m, 2, 16).program;
}

// The values a test lets the plan decide: those whose names end in one of
// `suffixes` (e.g. "attention_norm:out"), in every block.
std::vector<bool> decidable_values(const Program& p, const std::vector<std::string>& suffixes) {
  std::vector<bool> d(p.values.size(), false);
  for (size_t v = 0; v < p.values.size(); ++v) {
    const std::string& name = p.values[v].name;
    for (const std::string& s : suffixes) {
      if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
          p.nodes[p.values[v].producer].block >= 0) {
        d[v] = true;
      }
    }
  }
  return d;
}

struct Replayed {
  int64_t peak;
  int64_t cost;
};

// Every keep-set over the decidable values (the rest kept), each replayed.
std::vector<Replayed> brute_force(const Program& p, const std::vector<bool>& decidable) {
  std::vector<ValueId> free;
  for (size_t v = 0; v < decidable.size(); ++v) {
    if (decidable[v]) free.push_back(static_cast<ValueId>(v));
  }
  std::vector<Replayed> all;
  for (uint64_t mask = 0; mask < (uint64_t{1} << free.size()); ++mask) {
    std::vector<bool> keep(p.values.size(), true);
    for (size_t i = 0; i < free.size(); ++i) keep[free[i]] = (mask >> i) & 1;
    const Prediction r = predict(p, complete_plan(p, keep), {});
    all.push_back({r.peak_bytes, r.recompute_flops});
  }
  return all;
}

void expect_solver_matches_brute_force(const Program& p, const std::vector<bool>& decidable,
                                       BudgetProblem::Search search) {
  const std::vector<Replayed> all = brute_force(p, decidable);
  BudgetProblem pb = problem_for(p, {}, decidable);
  pb.search = search;
  int64_t lowest = all.front().peak, highest = all.front().peak;
  for (const Replayed& r : all) {
    lowest = std::min(lowest, r.peak);
    highest = std::max(highest, r.peak);
  }
  EXPECT_EQ(min_peak(pb), lowest);
  // Every distinct peak is a budget where the answer changes; try them all.
  std::vector<int64_t> budgets;
  for (const Replayed& r : all) budgets.push_back(r.peak);
  budgets.push_back(lowest - 1);
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  for (int64_t budget : budgets) {
    int64_t best = -1, best_peak = 0;
    for (const Replayed& r : all) {
      if (r.peak > budget) continue;
      if (best < 0 || r.cost < best || (r.cost == best && r.peak < best_peak)) {
        best = r.cost;
        best_peak = r.peak;
      }
    }
    const BudgetChoice c = solve_budget(pb, budget);
    ASSERT_EQ(c.feasible, best >= 0) << "budget " << budget;
    if (best < 0) continue;
    EXPECT_EQ(static_cast<int64_t>(c.cost), best) << "budget " << budget;
    EXPECT_EQ(c.peak, best_peak) << "budget " << budget;
    EXPECT_EQ(c.lower_bound, c.cost);
    const Prediction replayed = predict(p, plan_from_choice(pb, c), {});
    EXPECT_EQ(replayed.peak_bytes, c.peak);
    EXPECT_EQ(replayed.recompute_flops, best);
  }
}

// Both programs: the suffix program, and the forward search it falls back to.
class BudgetBruteForce : public testing::TestWithParam<BudgetProblem::Search> {};

TEST_P(BudgetBruteForce, MatchesOnTwoBlocks) {
  const Program p = tiny(2);
  expect_solver_matches_brute_force(
      p,
      decidable_values(
          p, {"attention_norm:out", "attention_norm:rstd", "rope_q:out", "attention.sdpa:out",
              "attention.sdpa:lse", "feed_forward.w1:out", "feed_forward.silu_mul:out"}),
      GetParam());
}

TEST_P(BudgetBruteForce, MatchesOnThreeBlocks) {
  const Program p = tiny(3);
  expect_solver_matches_brute_force(
      p,
      decidable_values(
          p, {"attention.wv:out", "attention_residual:out", "feed_forward.w3:out", "ffn_norm:out"}),
      GetParam());
}

INSTANTIATE_TEST_SUITE_P(Search, BudgetBruteForce,
                         testing::Values(BudgetProblem::Search::kSuffixFirst,
                                         BudgetProblem::Search::kForwardOnly),
                         [](const testing::TestParamInfo<BudgetProblem::Search>& info) {
                           return info.param == BudgetProblem::Search::kSuffixFirst ? "SuffixFirst"
                                                                                    : "ForwardOnly";
                         });

// As the budget falls, the peak never rises and the recompute never falls,
// and the replay of every answer has exactly the predicted peak.
TEST(BudgetSolver, MonotoneInTheBudget) {
  for (const Case& c : cases()) {
    const Program program = program_of(c);
    const BudgetProblem pb = problem_for(program, c.options);
    const std::vector<BudgetChoice> front = pareto_front(pb, 12);
    ASSERT_GE(front.size(), 5u) << c.name;
    for (size_t i = 0; i < front.size(); ++i) {
      const Prediction p = predict(program, plan_from_choice(pb, front[i]), c.options);
      EXPECT_EQ(p.peak_bytes, front[i].peak) << c.name;
      EXPECT_EQ(front[i].lower_bound, front[i].cost) << c.name << ": not proven optimal";
      if (i == 0) continue;
      EXPECT_LT(front[i].peak, front[i - 1].peak) << c.name;
      EXPECT_GE(front[i].cost, front[i - 1].cost) << c.name;
    }
  }
}

// Not a limit, a report: how long the biggest flavors take (README quotes it).
TEST(BudgetSolver, SolvesTheLargestFlavors) {
  struct Flavor {
    const char* name;
    const char* flavor;
  };
  for (const Flavor& f : {Flavor{"llama3", "8B"}, Flavor{"llama3", "70B"}, Flavor{"llama3", "405B"},
                          Flavor{"llama4", "17bx16e"}, Flavor{"llama4", "17bx128e"}}) {
    JobConfig::Model m;
    m.name = f.name;
    m.flavor = f.flavor;
    const Program program = build_model(m, 1, 8192).program;
    // This process's CPU time: the solver is single-threaded, so on a shared
    // machine it is the better estimate of the wall time on a quiet one.
    auto cpu_since = [](std::clock_t c0) {
      return static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    };
    std::clock_t c0 = std::clock();
    const BudgetProblem pb = problem_for(program, {});
    std::printf("%s %s: %zu block choices, table %.3f s CPU", f.name, f.flavor, pb.enumerated,
                cpu_since(c0));
    std::vector<int32_t> reference(pb.blocks.size());
    for (size_t b = 0; b < reference.size(); ++b) {
      reference[b] = pb.reference_option[pb.block_class[b]];
    }
    const int64_t lo = min_peak(pb), hi = peak_of(pb, reference);
    for (double fraction : {0.05, 0.2, 0.5, 0.8}) {
      c0 = std::clock();
      const BudgetChoice c = solve_budget(pb, lo + static_cast<int64_t>(fraction * (hi - lo)));
      std::printf("; solve at %.0f%% of the range %.3f s CPU", 100 * fraction, cpu_since(c0));
      EXPECT_TRUE(c.feasible);
      EXPECT_EQ(c.lower_bound, c.cost) << f.name << " " << f.flavor << ": not proven optimal";
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace remat
