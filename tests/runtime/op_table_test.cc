// Every op kind is complete (graph/op.h, "How to add an op"): a table row
// with a FLOP count and saved-values spec, CPU forward and backward kernels,
// and a finite-difference gradient check through the backend, run here for
// every kind by one generic check. A kind without a case below fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../kernels/test_util.h"
#include "graph/program.h"
#include "runtime/cpu_ops.h"

namespace remat {
namespace {

using Buffers = std::vector<std::vector<float>>;

// One op with small attrs: shapes of its inputs and parameters, which of
// them are differentiable, and a fix-up for inputs that must hold exact
// indices (expert ids, offsets, permutations).
struct FdCase {
  OpAttrs attrs;
  std::vector<Shape> inputs, params;
  std::vector<bool> input_differentiable, param_differentiable;
  std::function<void(Buffers& inputs)> prepare;
  double tol = 2e-3;
};

OpAttrs rows_dim(int64_t rows, int64_t dim) {
  OpAttrs a;
  a.rows = rows;
  a.dim = dim;
  return a;
}

OpAttrs heads(int64_t kv_heads) {
  OpAttrs a;
  a.batch = 2, a.seq = 5, a.heads = 4, a.kv_heads = kv_heads, a.head_dim = 4, a.theta = 1e4;
  return a;
}

OpAttrs moe(int64_t tokens, int64_t dim, int64_t experts, int64_t top_k) {
  OpAttrs a = rows_dim(tokens, dim);
  a.experts = experts, a.top_k = top_k;
  return a;
}

// top_k distinct expert ids per token, spread over the experts.
void expert_ids(std::vector<float>& ids, int64_t top_k, int64_t experts) {
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<float>((i / top_k * 3 + i % top_k) % experts);
}

std::map<OpKind, FdCase> fd_cases() {
  std::map<OpKind, FdCase> c;
  OpAttrs emb = rows_dim(6, 5);
  emb.n = 7;  // vocabulary
  c[OpKind::kEmbedding] = {emb, {}, {{7, 5}}, {}, {true}, nullptr};
  OpAttrs norm = rows_dim(3, 8);
  norm.eps = 1e-5f;
  c[OpKind::kRmsNorm] = {norm, {{3, 8}}, {{8}}, {true}, {true}, nullptr};
  OpAttrs lin;
  lin.m = 3, lin.k = 5, lin.n = 4;
  c[OpKind::kLinear] = {lin, {{3, 5}}, {{4, 5}}, {true}, {true}, nullptr};
  c[OpKind::kRope] = {heads(4), {{2, 5, 4, 4}}, {}, {true}, {}, nullptr};
  c[OpKind::kAttention] = {
      heads(2), {{2, 5, 4, 4}, {2, 5, 2, 4}, {2, 5, 2, 4}}, {}, {true, true, true}, {}, nullptr};
  c[OpKind::kSiluMul] = {rows_dim(3, 6), {{3, 6}, {3, 6}}, {}, {true, true}, {}, nullptr};
  c[OpKind::kAdd] = {rows_dim(3, 6), {{3, 6}, {3, 6}}, {}, {true, true}, {}, nullptr};
  c[OpKind::kCrossEntropy] = {rows_dim(6, 7), {{6, 7}}, {}, {true}, {}, nullptr, 2e-4};
  c[OpKind::kMoeRoute] = {moe(5, 0, 4, 2), {{5, 4}}, {{4}, {4}}, {true}, {false, false}, nullptr};
  c[OpKind::kMoeDispatch] = {
      moe(5, 3, 4, 2), {{5, 3}, {5, 2}, {5, 2}}, {}, {true, true, false}, {}, [](Buffers& in) {
        expert_ids(in[2], 2, 4);
      }};
  OpAttrs grouped = moe(0, 0, 3, 0);
  grouped.m = 7, grouped.k = 4, grouped.n = 3;
  c[OpKind::kGroupedLinear] = {grouped,     {{7, 4}, {4}},
                               {{3, 4, 3}}, {true, false},
                               {true},      [](Buffers& in) { in[1] = {0, 3, 3, 7}; }};
  c[OpKind::kMoeCombine] = {
      moe(5, 3, 0, 2), {{10, 3}, {10}}, {}, {true, false}, {}, [](Buffers& in) {
        const std::vector<float> perm = {3, 0, 7, 1, 9, 2, 5, 8, 4, 6};
        in[1] = perm;
      }};
  // Two chunks of logits, the last one ragged.
  OpAttrs head;
  head.m = 6, head.k = 5, head.n = 7, head.chunk = 4, head.rows = 6;
  c[OpKind::kLinearCrossEntropy] = {head, {{6, 5}}, {{7, 5}}, {true}, {true}, nullptr, 2e-4};
  return c;
}

bool is_loss_op(OpKind kind) {
  return kind == OpKind::kCrossEntropy || kind == OpKind::kLinearCrossEntropy;
}

// One op on the CPU backend with the case's random inputs, parameters,
// token ids and output weights r: forward() returns sum(out0 * r) (the loss
// op's out0 is the loss itself, r = 1, as its backward assumes), backward()
// the gradients of the inputs and parameters.
struct OpRun {
  OpRun(OpKind kind, const FdCase& fd)
      : info(op_info(kind)), node{kind, info.name, {}, {}, {}, -1, fd.attrs} {
    uint32_t seed = 1;
    for (const Shape& s : fd.inputs) in.push_back(cpu::testing::random_vector(numel(s), seed++));
    for (const Shape& s : fd.params)
      params.push_back(cpu::testing::random_vector(numel(s), seed++));
    for (const Shape& s : infer_output_shapes(node)) out.emplace_back(numel(s));
    if (fd.prepare) fd.prepare(in);
    const int64_t rows = std::max<int64_t>(fd.attrs.rows, 1);
    tokens = cpu::testing::random_tokens(rows, 7, seed++);
    targets = cpu::testing::random_tokens(rows, 7, seed++);
    r = is_loss_op(kind) ? std::vector<float>{1.0f}
                         : cpu::testing::random_vector(out[0].size(), seed++);
  }

  double forward() {
    OpBuffers b;
    for (auto& v : in) b.inputs.push_back(v.data());
    for (auto& v : params) b.params.push_back(v.data());
    for (auto& v : out) b.outputs.push_back(v.data());
    b.is_recompute = true;  // no state updates (MoE counts)
    std::vector<float> workspace(cpu_backend().forward_workspace_bytes(node) / sizeof(float));
    b.workspace = workspace.data();
    b.tokens = tokens.data();
    b.targets = targets.data();
    cpu_backend().forward(node, b);
    return cpu::testing::weighted_sum(out[0], r);
  }

  // After forward(). Input gradients marked in `fresh` start as NaN (any
  // bytes), the others as zeros. grad_in[0] of an in-place op is in[0].
  void backward(uint32_t fresh, Buffers& grad_in, Buffers& grad_params) {
    OpBuffers b;
    for (int i = 0; i < info.num_inputs; ++i)
      if (info.saved_inputs & (1u << i)) b.inputs.push_back(in[i].data());
    for (int i = 0; i < info.num_outputs; ++i)
      if (info.saved_outputs & (1u << i)) b.inputs.push_back(out[i].data());
    for (auto& v : params) b.params.push_back(v.data());
    grad_in.clear();
    grad_params.clear();
    for (size_t i = 0; i < in.size(); ++i) {
      const float init = ((fresh >> i) & 1) != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      grad_in.push_back(
          i == 0 && info.grad_in_place_of_input0 ? in[0] : std::vector<float>(in[i].size(), init));
    }
    for (auto& v : params) grad_params.emplace_back(v.size());
    for (auto& g : grad_in) b.grad_inputs.push_back(g.data());
    for (auto& g : grad_params) b.grad_params.push_back(g.data());
    b.fresh_grad_inputs = fresh;
    std::vector<float> workspace(cpu_backend().workspace_bytes(node) / sizeof(float));
    b.workspace = workspace.data();
    b.grad_output = r.data();
    b.tokens = tokens.data();
    b.targets = targets.data();
    cpu_backend().backward(node, b);
  }

  const OpInfo& info;
  Node node;
  Buffers in, params, out;
  std::vector<int32_t> tokens, targets;
  std::vector<float> r;
};

// Runs forward and backward of one op and compares every differentiable
// gradient with central differences of sum(out0 * r).
void check_op_gradients(OpKind kind, const FdCase& fd) {
  OpRun run(kind, fd);
  run.forward();
  Buffers grad_in, grad_params;
  run.backward(0, grad_in, grad_params);
  auto forward = [&] { return run.forward(); };
  const std::string name = run.info.name;
  for (size_t i = 0; i < run.in.size(); ++i)
    if (fd.input_differentiable[i])
      cpu::testing::check_gradient(name + " input " + std::to_string(i), run.in[i], grad_in[i],
                                   forward, 1e-2f, fd.tol);
  for (size_t i = 0; i < run.params.size(); ++i)
    if (fd.param_differentiable[i])
      cpu::testing::check_gradient(name + " param " + std::to_string(i), run.params[i],
                                   grad_params[i], forward, 1e-2f, fd.tol);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A backward handed fresh gradients (uninitialised, here NaN) writes the
// exact bits it accumulates into zeroed ones, for every gradient it produces;
// the executor relies on it to skip the memset (Backend::fresh_grad_inputs).
TEST(OpTable, FreshGradientsGetTheBitsOfZeroedOnes) {
  const std::map<OpKind, FdCase> cases = fd_cases();
  int checked = 0;
  for (const auto& [kind, fd] : cases) {
    const uint32_t fresh = cpu_backend().fresh_grad_inputs(kind);
    if (fresh == 0) continue;
    SCOPED_TRACE(op_info(kind).name);
    EXPECT_EQ(fresh >> op_info(kind).num_inputs, 0u);
    for (size_t i = 0; i < fd.inputs.size(); ++i) {  // only gradients it produces
      if (((fresh >> i) & 1) != 0) {
        EXPECT_TRUE(fd.input_differentiable[i]) << "input " << i;
      }
    }
    OpRun run(kind, fd);
    run.forward();
    Buffers zeroed_in, zeroed_params, fresh_in, fresh_params;
    run.backward(0, zeroed_in, zeroed_params);
    run.backward(fresh, fresh_in, fresh_params);
    for (size_t i = 0; i < zeroed_in.size(); ++i)
      EXPECT_TRUE(same_bits(zeroed_in[i], fresh_in[i])) << "input " << i;
    for (size_t i = 0; i < zeroed_params.size(); ++i)
      EXPECT_TRUE(same_bits(zeroed_params[i], fresh_params[i])) << "param " << i;
    ++checked;
  }
  // The matmuls, norms, RoPE, attention, SwiGLU, adds and the MoE ops.
  EXPECT_GE(checked, 10);
}

TEST(OpTable, EveryKindIsComplete) {
  const std::map<OpKind, FdCase> cases = fd_cases();
  for (int k = 0; k < kNumOpKinds; ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    const OpInfo& info = op_info(kind);
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.kind, kind);
    EXPECT_NE(info.flops, nullptr);
    EXPECT_NE(info.output_shapes, nullptr);
    EXPECT_NE(info.workspace_bytes, nullptr);
    // The saved-values spec names only inputs and outputs that exist.
    EXPECT_EQ(info.saved_inputs >> info.num_inputs, 0u);
    EXPECT_EQ(info.saved_outputs >> info.num_outputs, 0u);
    EXPECT_TRUE(cpu_has_kernels(kind));
    auto it = cases.find(kind);
    ASSERT_NE(it, cases.end()) << "no finite-difference case: add one to fd_cases()";
    const FdCase& fd = it->second;
    ASSERT_EQ(static_cast<int>(fd.inputs.size()), info.num_inputs);
    ASSERT_EQ(fd.input_differentiable.size(), fd.inputs.size());
    ASSERT_EQ(fd.param_differentiable.size(), fd.params.size());
    check_op_gradients(kind, fd);
  }
}

}  // namespace
}  // namespace remat
