// Steady-state training steps touch no new memory (issue 11): once the first
// steps have made every buffer, later steps get each one back from the
// allocator's cache (what the allocator reserves does not grow); the
// process's page faults are printed. Trained in-process, as the trainer's loop
// does (forward and backward, clipping, AdamW), on the debug models cut to
// 2 layers (llama4's second is an MoE one), each pair of family, dtype (fp32,
// bf16) and AC mode (none, op) covered once. tests/e2e/
// test_steady_state_faults.py holds the whole binary (data loader, metrics)
// to the same on the real batch.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ac/policy.h"
#include "ac/schedule.h"
#include "models/registry.h"
#include "runtime/executor.h"
#include "train/load_balance.h"
#include "train/optimizer.h"

namespace remat {
namespace {

constexpr int kWarmUpSteps = 2, kSteadySteps = 4;

int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

struct Growth {
  int64_t faults = 0, reserved_bytes = 0;
};

// What steps kWarmUpSteps + 1 .. kWarmUpSteps + kSteadySteps add. Batch
// 2 x seq 64: enough tokens for the kernels' parallel paths.
Growth steady_state_growth(const std::string& family, DType dtype, AcOptions::Mode mode) {
  JobConfig::Model model;
  model.name = family;
  model.flavor = "debugmodel";
  model.n_layers = 2;
  Program program = build_model(model, 2, 64).program;
  set_compute_dtype(program, dtype);
  AcOptions ac;
  ac.mode = mode;
  Allocator allocator;
  ModelState state(program, allocator, /*with_gradients=*/true);
  state.initialize(3);
  Executor executor(program, make_schedule(program, make_plan(program, ac), true), allocator,
                    state);
  std::mt19937 rng(5);
  std::vector<int32_t> inputs(static_cast<size_t>(program.batch * program.seq));
  std::vector<int32_t> targets(inputs.size());
  Growth growth;
  for (int step = 1; step <= kWarmUpSteps + kSteadySteps; ++step) {
    if (step == kWarmUpSteps + 1) {
      growth.faults = -minor_faults();
      growth.reserved_bytes = -allocator.reserved();
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i] = static_cast<int32_t>(rng() % 256);
      targets[i] = static_cast<int32_t>(rng() % 256);
    }
    executor.run(Batch{inputs.data(), targets.data()});
    const GradClip clip = clip_grad_norm(state, 1.0);
    update_expert_bias(state);
    adamw_step(state, AdamWConfig{}, 1e-3, step, clip.scale);
  }
  growth.faults += minor_faults();
  growth.reserved_bytes += allocator.reserved();
  return growth;
}

TEST(SteadyState, StepsAfterWarmUpReserveNothing) {
  using Mode = AcOptions::Mode;
  const struct {
    const char* family;
    DType dtype;
    Mode mode;
  } setups[] = {{"llama3", DType::kF32, Mode::kNone},
                {"llama3", DType::kBF16, Mode::kSelectiveOp},
                {"llama4", DType::kF32, Mode::kSelectiveOp},
                {"llama4", DType::kBF16, Mode::kNone}};
  for (const auto& s : setups) {
    AcOptions ac;
    ac.mode = s.mode;
    SCOPED_TRACE(std::string(s.family) + " " + to_string(s.dtype) + " " + describe(ac));
    const Growth growth = steady_state_growth(s.family, s.dtype, s.mode);
    EXPECT_EQ(growth.reserved_bytes, 0);
    // Page faults are reported, not asserted: the process's count also
    // moves with OpenMP's and oneDNN's own memory (oneDNN caches a primitive
    // per shape, and an MoE expert's row count changes from step to step),
    // and a hard zero failed intermittently in CI. bench/steady_state.py
    // measures them per step.
    std::printf("%s %s: %lld minor page faults over %d steady steps\n", s.family,
                to_string(s.dtype), static_cast<long long>(growth.faults), kSteadySteps);
  }
}

}  // namespace
}  // namespace remat
