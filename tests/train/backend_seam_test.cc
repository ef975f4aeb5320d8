// The backend seam (runtime/backend.h): training steps of the debug models
// through a checking backend, which verifies every buffer it is handed, give
// bit-identical results to the CPU backend; and the checking backend catches
// a freed buffer, a buffer of the wrong size and one it never handed out.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ac/policy.h"
#include "ac/schedule.h"
#include "checking_backend.h"
#include "models/registry.h"
#include "runtime/executor.h"
#include "train/checkpoint.h"
#include "train/load_balance.h"
#include "train/optimizer.h"

namespace remat {
namespace {

using testing::CheckingBackend;

// Two layers (llama4: a dense block, then an MoE block) reach every op kind
// and backend call of the six, in a third of the time.
Program debug_program(const std::string& family) {
  JobConfig::Model model;
  model.name = family;
  model.flavor = "debugmodel";
  model.n_layers = 2;
  return build_model(model, /*batch=*/2, /*seq=*/16).program;
}

struct Trained {
  std::vector<double> losses, grad_norms;
  std::vector<std::vector<float>> params;  // after the last step
};

std::vector<float> to_host(Backend& backend, const Tensor& t) {
  const HostView view(backend, t);
  return std::vector<float>(view.data(), view.data() + t.numel());
}

// Three steps of the trainer's loop (selective op AC, so values are also
// recomputed), then a checkpoint round trip into a fresh state.
Trained train(const Program& program, Backend& backend, Allocator& allocator) {
  ModelState state(program, allocator, /*with_gradients=*/true, backend);
  state.initialize(0);
  AcOptions ac;
  ac.mode = AcOptions::Mode::kSelectiveOp;
  Executor executor(program, make_schedule(program, make_plan(program, ac), true), allocator,
                    state);
  std::mt19937 rng(11);
  std::vector<int32_t> inputs(program.batch * program.seq), targets(inputs.size());
  Trained out;
  for (int64_t step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i] = static_cast<int32_t>(rng() % 256);
      targets[i] = static_cast<int32_t>(rng() % 256);
    }
    state.zero_gradients();
    out.losses.push_back(executor.run(Batch{inputs.data(), targets.data()}));
    const GradClip clip = clip_grad_norm(state, 1.0);
    out.grad_norms.push_back(clip.norm);
    update_expert_bias(state);
    adamw_step(state, AdamWConfig{}, 1e-3, step, clip.scale);
  }
  const std::string path = ::testing::TempDir() + "seam_" + backend.name() + "_" +
                           std::to_string(program.n_blocks) + ".safetensors";
  save_checkpoint(path, state, 3, /*with_optimizer=*/true);
  ModelState loaded(program, allocator, /*with_gradients=*/false, backend);
  EXPECT_EQ(load_checkpoint(path, loaded, /*with_optimizer=*/true).step, 3);
  std::remove(path.c_str());
  for (size_t i = 0; i < loaded.params.size(); ++i) {
    out.params.push_back(to_host(backend, loaded.params[i]));
    EXPECT_EQ(to_host(backend, loaded.exp_avg_sq[i]), to_host(backend, state.exp_avg_sq[i]));
  }
  return out;
}

void expect_bit_identical(const Trained& a, const Trained& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_EQ(a.params[i].size(), b.params[i].size());
    EXPECT_EQ(0, std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * 4))
        << "parameter " << i;
  }
}

TEST(BackendSeam, TrainingThroughTheCheckingBackendIsBitIdenticalToCpu) {
  for (const char* family : {"llama3", "llama4"}) {
    SCOPED_TRACE(family);
    const Program program = debug_program(family);
    Allocator cpu_allocator;
    const Trained reference = train(program, cpu_backend(), cpu_allocator);

    CheckingBackend checking(program);
    {
      Allocator allocator(checking.make_storage());
      const Trained through_seam = train(program, checking, allocator);
      expect_bit_identical(reference, through_seam);
      EXPECT_EQ(allocator.peak(), cpu_allocator.peak());
    }
    EXPECT_EQ(checking.live_buffers(), 0);  // every buffer went back
    const CheckingBackend::Calls& calls = checking.calls();
    EXPECT_GT(calls.forward, 0);
    EXPECT_GT(calls.backward, 0);
    EXPECT_GT(calls.zero, 0);
    EXPECT_GT(calls.sum_squares, 0);
    EXPECT_GT(calls.adamw, 0);
    EXPECT_GT(calls.from_host, 0);  // initial weights, checkpoint load
    EXPECT_GT(calls.to_host, 0);    // checkpoint save
    EXPECT_EQ(calls.expert_bias > 0, std::string(family) == "llama4");
  }
}

TEST(BackendSeam, CheckingBackendCatchesBadBuffers) {
  const Program program = debug_program("llama3");
  const Node* add = nullptr;
  for (const Node& n : program.nodes)
    if (n.kind == OpKind::kAdd && add == nullptr) add = &n;
  ASSERT_NE(add, nullptr);
  CheckingBackend checking(program);
  Allocator allocator(checking.make_storage());
  auto value = [&](ValueId v) {
    return Tensor(allocator, program.values[v].shape, MemoryCategory::kTemporaries);
  };
  Tensor a = value(add->inputs[0]), b = value(add->inputs[1]), out = value(add->outputs[0]);
  OpBuffers buffers;
  buffers.inputs = {a.data(), b.data()};
  buffers.outputs = {out.data()};
  EXPECT_NO_THROW(checking.forward(*add, buffers));

  const float* freed = b.data();
  b.reset();
  buffers.inputs[1] = freed;
  EXPECT_THROW(checking.forward(*add, buffers), std::logic_error);

  Tensor small(allocator, {3}, MemoryCategory::kTemporaries);
  buffers.inputs[1] = small.data();
  EXPECT_THROW(checking.forward(*add, buffers), std::logic_error);

  Allocator host;  // storage the checking backend never made
  Tensor foreign(host, program.values[add->inputs[1]].shape, MemoryCategory::kTemporaries);
  buffers.inputs[1] = foreign.data();
  EXPECT_THROW(checking.forward(*add, buffers), std::logic_error);
  EXPECT_THROW(checking.zero(foreign), std::logic_error);
}

}  // namespace
}  // namespace remat
