#include "planner/setup.h"

#include <cstdlib>

#include "ac/knapsack.h"
#include "core/error.h"
#include "planner/job_options.h"

namespace remat {

bool runs_bf16(const JobConfig& config, const PlannerOptions& planner) {
  return config.training.mixed_precision_param == "bfloat16" && planner.shard_degree <= 1;
}

AcChoice choose_ac_plan(const JobConfig& config, const Program& program,
                        const PlannerOptions& planner) {
  AcChoice c;
  c.options = resolve_auto_threshold(program, ac_options_from_config(config), planner, &c.auto_why);
  const AcOptions::Mode mode = c.options.mode;
  if (!c.auto_why.empty()) {
    c.plan = make_plan(program, c.options);
    c.plan.description += "; " + c.auto_why;
  } else if (mode == AcOptions::Mode::kMemoryBudget &&
             config.activation_checkpoint.budget_solver == "pytorch_knapsack") {
    c.plan =
        make_pytorch_knapsack_plan(program, std::strtod(c.options.memory_budget.c_str(), nullptr));
  } else if (mode == AcOptions::Mode::kMemoryBudget || mode == AcOptions::Mode::kAuto) {
    // The budget solver's block model prices fp32 values; the bf16 engine's
    // staging copies (fp32 inputs of MoE routing and the loss, bf16 weight and
    // gradient copies) would put the replayed peak over the budget.
    if (program.compute_dtype == DType::kBF16) {
      throw InputError(
          "activation_checkpoint.mode = \"" + config.activation_checkpoint.mode +
          "\" with training.mixed_precision_param = \"bfloat16\" is not supported by this build "
          "yet: the budget solver does not model bf16's staging copies, so it could not bound "
          "the true peak; use mixed_precision_param = \"float32\" or a fixed mode (none, full, "
          "selective)");
    }
    c.budget = make_budget_plan(c.options, config, program, planner);
    c.plan = c.budget->plan;
  } else {
    c.plan = make_plan(program, c.options);
  }
  return c;
}

Setup make_setup(const JobConfig& config, int64_t batch, Pass pass, const PlannerOptions& planner) {
  Setup s{build_model(config.model, batch, config.training.seq_len), pass, AcChoice{}};
  if (runs_bf16(config, planner)) set_compute_dtype(s.model.program, DType::kBF16);
  if (pass == Pass::kTraining) {
    s.ac = choose_ac_plan(config, s.model.program, planner);
  } else {
    s.ac.plan = make_inference_plan(s.model.program);
  }
  return s;
}

}  // namespace remat
