// Every op kind is complete (graph/op.h, "How to add an op"): a table row
// with a FLOP count and saved-values spec, CPU forward and backward kernels,
// and a finite-difference gradient check through the backend, run here for
// every kind by one generic check. A kind without a case below fails.
#include <gtest/gtest.h>

#include <functional>
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
  return c;
}

// Runs forward and backward of one op on the CPU backend and compares every
// differentiable gradient with central differences of sum(out0 * r). The
// loss op's out0 is the loss itself (r = 1, as its backward assumes).
void check_op_gradients(OpKind kind, const FdCase& fd) {
  const OpInfo& info = op_info(kind);
  Node node{kind, info.name, {}, {}, {}, -1, fd.attrs};
  const std::vector<Shape> out_shapes = infer_output_shapes(node);
  uint32_t seed = 1;
  Buffers in, params, out;
  for (const Shape& s : fd.inputs) in.push_back(cpu::testing::random_vector(numel(s), seed++));
  for (const Shape& s : fd.params) params.push_back(cpu::testing::random_vector(numel(s), seed++));
  for (const Shape& s : out_shapes) out.emplace_back(numel(s));
  if (fd.prepare) fd.prepare(in);
  const int64_t rows = std::max<int64_t>(fd.attrs.rows, 1);
  std::vector<int32_t> tokens = cpu::testing::random_tokens(rows, 7, seed++);
  std::vector<int32_t> targets = cpu::testing::random_tokens(rows, 7, seed++);
  const std::vector<float> r = kind == OpKind::kCrossEntropy
                                   ? std::vector<float>{1.0f}
                                   : cpu::testing::random_vector(out[0].size(), seed++);
  Backend& backend = cpu_backend();
  auto run_forward = [&] {
    OpBuffers b;
    for (auto& v : in) b.inputs.push_back(v.data());
    for (auto& v : params) b.params.push_back(v.data());
    for (auto& v : out) b.outputs.push_back(v.data());
    b.is_recompute = true;  // no state updates (MoE counts)
    b.tokens = tokens.data();
    b.targets = targets.data();
    backend.forward(node, b);
    return cpu::testing::weighted_sum(out[0], r);
  };
  run_forward();
  OpBuffers b;
  for (int i = 0; i < info.num_inputs; ++i)
    if (info.saved_inputs & (1u << i)) b.inputs.push_back(in[i].data());
  for (int i = 0; i < info.num_outputs; ++i)
    if (info.saved_outputs & (1u << i)) b.inputs.push_back(out[i].data());
  for (auto& v : params) b.params.push_back(v.data());
  Buffers grad_in, grad_params;
  for (size_t i = 0; i < in.size(); ++i)
    grad_in.push_back(i == 0 && info.grad_in_place_of_input0 ? in[0]
                                                             : std::vector<float>(in[i].size()));
  for (auto& v : params) grad_params.emplace_back(v.size());
  for (auto& g : grad_in) b.grad_inputs.push_back(g.data());
  for (auto& g : grad_params) b.grad_params.push_back(g.data());
  std::vector<float> workspace(backend.workspace_bytes(node) / sizeof(float));
  b.workspace = workspace.data();
  b.grad_output = r.data();
  b.tokens = tokens.data();
  b.targets = targets.data();
  backend.backward(node, b);
  const std::string name = info.name;
  for (size_t i = 0; i < in.size(); ++i)
    if (fd.input_differentiable[i])
      cpu::testing::check_gradient(name + " input " + std::to_string(i), in[i], grad_in[i],
                                   run_forward, 1e-2f, fd.tol);
  for (size_t i = 0; i < params.size(); ++i)
    if (fd.param_differentiable[i])
      cpu::testing::check_gradient(name + " param " + std::to_string(i), params[i], grad_params[i],
                                   run_forward, 1e-2f, fd.tol);
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
