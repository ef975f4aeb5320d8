// The shared setup path (planner/setup.h): every command gets the model at
// the batch it asks for and the plan its pass needs, and choose_ac_plan keeps
// the pieces `remat plan` reports next to the plan it runs.
#include "planner/setup.h"

#include <gtest/gtest.h>

#include "planner/job_options.h"

namespace remat {
namespace {

JobConfig debug_config(const std::string& mode) {
  JobConfig config;
  config.training.seq_len = 64;
  config.activation_checkpoint.mode = mode;
  return config;
}

TEST(Setup, TrainingRunsTheConfiguredPlan) {
  const JobConfig config = debug_config("full");
  // remat:: because gtest's Test has a member Setup (a typo trap for SetUp).
  const remat::Setup setup = make_setup(config, 2, Pass::kTraining);
  EXPECT_EQ(setup.program().batch, 2);
  EXPECT_EQ(setup.program().seq, 64);
  EXPECT_EQ(setup.pass, Pass::kTraining);
  const Plan full = make_plan(setup.program(), ac_options_from_config(config));
  EXPECT_EQ(setup.ac.plan.keep, full.keep);
  EXPECT_EQ(setup.ac.plan.recompute, full.recompute);
  EXPECT_FALSE(setup.ac.budget.has_value());
  EXPECT_TRUE(setup.ac.auto_why.empty());
}

TEST(Setup, ForwardOnlyRunsTheInferencePlan) {
  const remat::Setup setup = make_setup(debug_config("none"), 1, Pass::kForwardOnly);
  const Plan inference = make_inference_plan(setup.program());
  EXPECT_EQ(setup.ac.plan.keep, inference.keep);
  EXPECT_EQ(setup.ac.plan.description, inference.description);
}

TEST(Setup, BudgetModesKeepTheSolution) {
  JobConfig config = debug_config("memory_budget");
  config.activation_checkpoint.memory_budget = "0.5";
  const remat::Setup setup = make_setup(config, 2, Pass::kTraining);
  ASSERT_TRUE(setup.ac.budget.has_value());
  EXPECT_EQ(setup.ac.plan.keep, setup.ac.budget->plan.keep);
  EXPECT_EQ(setup.ac.plan.description, setup.ac.budget->plan.description);
}

TEST(Setup, AutoThresholdSaysWhy) {
  JobConfig config = debug_config("selective");
  config.activation_checkpoint.selective_ac_option = "op";
  config.activation_checkpoint.selective_op_ac_mm_flops_threshold.automatic = true;
  const Program program = build_model(config.model, 2, 64).program;
  const AcChoice c = choose_ac_plan(config, program, PlannerOptions{});
  EXPECT_FALSE(c.options.auto_threshold);
  EXPECT_FALSE(c.auto_why.empty());
  EXPECT_NE(c.plan.description.find(c.auto_why), std::string::npos);
}

}  // namespace
}  // namespace remat
