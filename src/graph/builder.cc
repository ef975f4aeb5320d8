#include "graph/builder.h"

#include <stdexcept>

namespace remat {

namespace {
const char* output_suffix(OpKind kind, size_t index) {
  if (index == 0) return ":out";
  switch (kind) {
    case OpKind::kRmsNorm: return ":rstd";
    case OpKind::kAttention:
    case OpKind::kCrossEntropy: return ":lse";
    default: return ":out1";
  }
}
}  // namespace

ProgramBuilder::ProgramBuilder(int64_t batch, int64_t seq) {
  program_.batch = batch;
  program_.seq = seq;
}

ParamId ProgramBuilder::param(const std::string& fqn, Shape shape, ParamInit init) {
  program_.params.push_back(Param{fqn, std::move(shape), init, true});
  return static_cast<ParamId>(program_.params.size() - 1);
}

ValueId ProgramBuilder::add_node(OpKind kind, const std::string& fqn,
                                 std::vector<ValueId> inputs, std::vector<ParamId> params,
                                 const OpAttrs& attrs) {
  if (static_cast<int>(inputs.size()) != op_info(kind).num_inputs) {
    throw std::logic_error("wrong number of inputs for " + fqn);
  }
  Node node{kind, fqn, std::move(inputs), {}, std::move(params), block_, attrs};
  const auto node_index = static_cast<int32_t>(program_.nodes.size());
  std::vector<Shape> shapes = infer_output_shapes(node);
  for (size_t i = 0; i < shapes.size(); ++i) {
    node.outputs.push_back(static_cast<ValueId>(program_.values.size()));
    program_.values.push_back(
        Value{fqn + output_suffix(kind, i), std::move(shapes[i]), node_index});
  }
  if (block_ >= program_.n_blocks) program_.n_blocks = block_ + 1;
  program_.nodes.push_back(std::move(node));
  return program_.nodes.back().outputs[0];
}

ValueId ProgramBuilder::embedding(const std::string& fqn, ParamId table) {
  OpAttrs a;
  a.rows = program_.batch * program_.seq;
  a.dim = program_.params[table].shape[1];
  a.n = program_.params[table].shape[0];  // vocabulary
  return add_node(OpKind::kEmbedding, fqn, {}, {table}, a);
}

ValueId ProgramBuilder::rmsnorm(const std::string& fqn, ValueId x, ParamId weight,
                                float eps) {
  OpAttrs a;
  a.rows = shape(x)[0];
  a.dim = shape(x)[1];
  a.eps = eps;
  return add_node(OpKind::kRmsNorm, fqn, {x}, {weight}, a);
}

ValueId ProgramBuilder::linear(const std::string& fqn, ValueId x, ParamId weight) {
  const Shape& w = program_.params[weight].shape;
  OpAttrs a;
  a.m = numel(shape(x)) / w[1];
  a.k = w[1];
  a.n = w[0];
  if (a.m * a.k != numel(shape(x))) throw std::logic_error("linear shape mismatch at " + fqn);
  return add_node(OpKind::kLinear, fqn, {x}, {weight}, a);
}

ValueId ProgramBuilder::rope(const std::string& fqn, ValueId x, int64_t heads,
                             int64_t head_dim, double theta) {
  OpAttrs a;
  a.batch = program_.batch;
  a.seq = program_.seq;
  a.heads = heads;
  a.head_dim = head_dim;
  a.theta = theta;
  return add_node(OpKind::kRope, fqn, {x}, {}, a);
}

ValueId ProgramBuilder::attention(const std::string& fqn, ValueId q, ValueId k, ValueId v,
                                  int64_t heads, int64_t kv_heads, int64_t head_dim) {
  OpAttrs a;
  a.batch = program_.batch;
  a.seq = program_.seq;
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.head_dim = head_dim;
  return add_node(OpKind::kAttention, fqn, {q, k, v}, {}, a);
}

ValueId ProgramBuilder::silu_mul(const std::string& fqn, ValueId a_value, ValueId b) {
  OpAttrs a;
  a.rows = shape(a_value)[0];
  a.dim = numel(shape(a_value)) / a.rows;
  return add_node(OpKind::kSiluMul, fqn, {a_value, b}, {}, a);
}

ValueId ProgramBuilder::add(const std::string& fqn, ValueId a_value, ValueId b) {
  OpAttrs a;
  a.rows = shape(a_value)[0];
  a.dim = numel(shape(a_value)) / a.rows;
  return add_node(OpKind::kAdd, fqn, {a_value, b}, {}, a);
}

ValueId ProgramBuilder::cross_entropy(const std::string& fqn, ValueId logits) {
  OpAttrs a;
  a.rows = shape(logits)[0];
  a.dim = shape(logits)[1];
  ValueId loss = add_node(OpKind::kCrossEntropy, fqn, {logits}, {}, a);
  program_.loss = loss;
  return loss;
}

Program ProgramBuilder::finish() { return std::move(program_); }

}  // namespace remat
