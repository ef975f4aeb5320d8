// The shared setup path (planner/setup.h): every command gets the model at
// the batch it asks for and the plan its pass needs, and choose_ac_plan keeps
// the pieces `remat plan` reports next to the plan it runs.
#include "planner/setup.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
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

// torchtitan's training.global_batch_size: -1 is one microbatch; a multiple
// of local x ranks is that many microbatches; anything else names the sizes.
TEST(JobOptions, GradientAccumulationSteps) {
  JobConfig config;
  config.training.local_batch_size = 4;
  EXPECT_EQ(gradient_accumulation_steps(config, 1), 1);
  EXPECT_EQ(gradient_accumulation_steps(config, 8), 1);
  config.training.global_batch_size = 32;
  EXPECT_EQ(gradient_accumulation_steps(config, 1), 8);
  EXPECT_EQ(gradient_accumulation_steps(config, 2), 4);
  EXPECT_EQ(gradient_accumulation_steps(config, 8), 1);
  try {
    gradient_accumulation_steps(config, 3);
    ADD_FAILURE() << "32 is not a multiple of 4 x 3";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.global_batch_size = 32"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("4 x 3 = 12"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gradient_accumulation_steps(config, 16), InputError);  // 64 per pass > 32
  // A product past int64 is no divisor of any global batch.
  EXPECT_THROW(gradient_accumulation_steps(config, INT64_MAX / 2), InputError);
  config.parallelism.data_parallel_replicate_degree = 2;
  config.parallelism.data_parallel_shard_degree = 4;
  EXPECT_EQ(data_parallel_ranks(config), 8);
}

}  // namespace
}  // namespace remat
