// MoE routing in the runtime: the forward pass counts tokens per expert once
// (a recompute never counts), a re-run of the route op decides exactly the
// same experts, and every AC mode gives bit-identical gradients.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>

#include "ac/policy.h"
#include "in_place_steps.h"
#include "models/llama4.h"
#include "runtime/cpu_ops.h"
#include "runtime/executor.h"

namespace remat {
namespace {

Llama4Args small_moe() {
  Llama4Args a;
  a.base.dim = 64;
  a.base.n_layers = 4;
  a.base.n_heads = 4;
  a.base.n_kv_heads = 2;
  a.base.vocab_size = 300;
  a.base.multiple_of = 32;
  a.num_experts = 4;
  a.top_k = 2;
  a.interleave_moe_layer_step = 2;
  return a;
}

TEST(MoeRuntime, RerunRouteDecidesTheSameAndDoesNotCount) {
  Program p = build_llama4_program(small_moe(), 2, 16);
  const Node* route = nullptr;
  for (const Node& n : p.nodes) {
    if (n.kind == OpKind::kMoeRoute) route = &n;
  }
  ASSERT_NE(route, nullptr);
  const int64_t tokens = route->attrs.rows, experts = route->attrs.experts, k = route->attrs.top_k;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> logits(tokens * experts), bias(experts), counts(experts, 0);
  for (float& x : logits) x = normal(rng);
  for (int64_t e = 0; e < experts; ++e) bias[e] = 0.01f * static_cast<float>(e % 2);
  std::vector<float> scores[2], indices[2];
  for (int pass = 0; pass < 2; ++pass) {
    scores[pass].assign(tokens * k, -1);
    indices[pass].assign(tokens * k, -1);
    OpBuffers b;
    b.inputs = {logits.data()};
    b.params = {bias.data(), counts.data()};
    b.mutable_params = {bias.data(), counts.data()};
    b.outputs = {scores[pass].data(), indices[pass].data()};
    b.is_recompute = pass == 1;
    cpu_forward(*route, b);
  }
  EXPECT_EQ(0, std::memcmp(indices[0].data(), indices[1].data(), indices[0].size() * 4));
  EXPECT_EQ(0, std::memcmp(scores[0].data(), scores[1].data(), scores[0].size() * 4));
  float total = 0;
  for (float c : counts) total += c;
  EXPECT_EQ(total, static_cast<float>(tokens * k));  // counted once, by the forward
  for (int64_t t = 0; t < tokens; ++t) {
    EXPECT_NE(indices[0][t * k], indices[0][t * k + 1]);  // k distinct experts
  }
}

TEST(MoeRuntime, EveryAcModeGivesIdenticalGradientsAndCountsOnce) {
  Program p = build_llama4_program(small_moe(), 2, 16);
  std::mt19937 rng(7);
  std::vector<int32_t> inputs(32), targets(32);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<int32_t>(rng() % 300);
    targets[i] = static_cast<int32_t>(rng() % 300);
  }
  std::vector<AcOptions> modes(4);
  modes[0].mode = AcOptions::Mode::kNone;
  modes[1].mode = AcOptions::Mode::kFull;
  modes[2].mode = AcOptions::Mode::kSelectiveOp;
  modes[3].mode = AcOptions::Mode::kSelectiveOp;
  modes[3].mm_flops_threshold = 1e50;
  std::vector<std::vector<float>> reference;
  for (const AcOptions& o : modes) {
    Allocator allocator;
    ModelState state(p, allocator, true);
    state.initialize(0);
    const Plan plan = make_plan(p, o);
    Executor ex(p, make_schedule(p, plan, true), allocator, state);
    ex.run(Batch{inputs.data(), targets.data()});
    for (int32_t n : ex.counts().recomputed_nodes) {
      EXPECT_NE(p.nodes[n].kind, OpKind::kMoeRoute) << describe(o);
    }
    for (const Node& n : p.nodes) {
      if (n.kind != OpKind::kMoeRoute) continue;
      const Tensor& counts = state.params[n.params[1]];
      float total = 0;
      for (int64_t e = 0; e < counts.numel(); ++e) total += counts.data()[e];
      EXPECT_EQ(total, 32.0f * 2) << describe(o) << " " << n.fqn;
    }
    std::vector<std::vector<float>> grads;
    for (const Tensor& g : state.grads) grads.emplace_back(g.data(), g.data() + g.numel());
    if (reference.empty()) {
      reference = grads;
    } else {
      for (size_t i = 0; i < grads.size(); ++i) {
        EXPECT_EQ(grads[i], reference[i]) << describe(o) << " " << p.params[i].fqn;
      }
    }
  }
}

// Where the plan lets them die at their reader's backward, every SwiGLU
// gate's inputs and every w2's input become their own gradients, the routed
// experts' grouped w2 included, and those steps book no new bytes.
TEST(MoeRuntime, DyingExpertRowsBecomeTheirGradientsAndBookNothing) {
  Program p = build_llama4_program(small_moe(), 2, 16);
  const std::map<std::string, uint32_t> expected = {
      {"feed_forward.silu_mul", 0b11},      {"feed_forward.w2", 0b1},
      {"moe.shared_expert.silu_mul", 0b11}, {"moe.shared_expert.w2", 0b1},
      {"moe.experts.silu_mul", 0b11},       {"moe.experts.w2", 0b1}};
  std::vector<int32_t> inputs(32), targets(32);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<int32_t>((i * 37) % 300);
    targets[i] = static_cast<int32_t>((i * 91 + 5) % 300);
  }
  std::vector<AcOptions> modes(3);
  modes[0].mode = AcOptions::Mode::kNone;
  modes[1].mode = AcOptions::Mode::kFull;
  modes[2].mode = AcOptions::Mode::kSelectiveOp;
  for (const AcOptions& mode : modes) {
    SCOPED_TRACE(describe(mode));
    const Schedule schedule = make_schedule(p, make_plan(p, mode), true);
    // Per dense layer (0, 2) the gate and w2; per MoE layer (1, 3) the
    // shared expert's and the routed experts' gate and w2.
    EXPECT_EQ(expect_marked_inputs(p, schedule, expected), 2 * 2 + 2 * 4);
    EXPECT_EQ(booked_by_in_place_steps(p, schedule, Batch{inputs.data(), targets.data()}), 0);
  }
}

}  // namespace
}  // namespace remat
