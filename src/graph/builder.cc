#include "graph/builder.h"

#include <stdexcept>

namespace remat {

ProgramBuilder::ProgramBuilder(int64_t batch, int64_t seq) {
  program_.batch = batch;
  program_.seq = seq;
}

ParamId ProgramBuilder::param(const std::string& fqn, Shape shape, ParamInit init) {
  program_.params.push_back(Param{fqn, std::move(shape), init, true});
  return static_cast<ParamId>(program_.params.size() - 1);
}

ParamId ProgramBuilder::buffer(const std::string& fqn, Shape shape) {
  program_.params.push_back(Param{fqn, std::move(shape), {ParamInit::Kind::kZeros}, false});
  return static_cast<ParamId>(program_.params.size() - 1);
}

ValueId ProgramBuilder::add_node(OpKind kind, const std::string& fqn, std::vector<ValueId> inputs,
                                 std::vector<ParamId> params, const OpAttrs& attrs) {
  const OpInfo& info = op_info(kind);
  if (static_cast<int>(inputs.size()) != info.num_inputs) {
    throw std::logic_error("wrong number of inputs for " + fqn);
  }
  Node node{kind, fqn, std::move(inputs), {}, std::move(params), block_, attrs};
  const auto node_index = static_cast<int32_t>(program_.nodes.size());
  std::vector<Shape> shapes = infer_output_shapes(node);
  if (static_cast<int>(shapes.size()) != info.num_outputs) {
    throw std::logic_error("op table: wrong number of output shapes for " + fqn);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    node.outputs.push_back(static_cast<ValueId>(program_.values.size()));
    program_.values.push_back(
        Value{fqn + info.output_suffixes[i], std::move(shapes[i]), node_index});
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

ValueId ProgramBuilder::rmsnorm(const std::string& fqn, ValueId x, ParamId weight, float eps) {
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

ValueId ProgramBuilder::linear_in_out(const std::string& fqn, ValueId x, ParamId weight) {
  const Shape& w = program_.params[weight].shape;
  OpAttrs a;
  a.k = w[w.size() - 2];
  a.n = w[w.size() - 1];
  a.m = numel(shape(x)) / a.k;
  a.weight_in_out = true;
  if (a.m * a.k != numel(shape(x)) || a.k * a.n != numel(w)) {
    throw std::logic_error("linear shape mismatch at " + fqn);
  }
  return add_node(OpKind::kLinear, fqn, {x}, {weight}, a);
}

std::pair<ValueId, ValueId> ProgramBuilder::moe_route(const std::string& fqn, ValueId logits,
                                                      ParamId expert_bias, ParamId counts,
                                                      int64_t top_k, bool sigmoid) {
  OpAttrs a;
  a.rows = shape(logits)[0];
  a.experts = shape(logits)[1];
  a.top_k = top_k;
  a.sigmoid = sigmoid;
  if (top_k < 1 || top_k > a.experts) throw std::logic_error("bad top_k at " + fqn);
  ValueId scores = add_node(OpKind::kMoeRoute, fqn, {logits}, {expert_bias, counts}, a);
  return {scores, program_.nodes.back().outputs[1]};
}

MoeDispatched ProgramBuilder::moe_dispatch(const std::string& fqn, ValueId x, ValueId scores,
                                           ValueId indices, int64_t experts) {
  OpAttrs a;
  a.rows = shape(x)[0];
  a.dim = shape(x)[1];
  a.top_k = shape(scores)[1];
  a.experts = experts;
  ValueId rows = add_node(OpKind::kMoeDispatch, fqn, {x, scores, indices}, {}, a);
  const Node& node = program_.nodes.back();
  return {rows, node.outputs[1], node.outputs[2]};
}

ValueId ProgramBuilder::grouped_linear(const std::string& fqn, ValueId rows, ValueId offsets,
                                       ParamId weight) {
  const Shape& w = program_.params[weight].shape;
  OpAttrs a;
  a.experts = w[0];
  a.k = w[1];
  a.n = w[2];
  a.m = shape(rows)[0];
  if (shape(rows)[1] != a.k || shape(offsets)[0] != a.experts + 1) {
    throw std::logic_error("grouped linear shape mismatch at " + fqn);
  }
  return add_node(OpKind::kGroupedLinear, fqn, {rows, offsets}, {weight}, a);
}

ValueId ProgramBuilder::moe_combine(const std::string& fqn, ValueId rows, ValueId perm,
                                    int64_t top_k) {
  OpAttrs a;
  a.top_k = top_k;
  a.rows = shape(rows)[0] / top_k;
  a.dim = shape(rows)[1];
  return add_node(OpKind::kMoeCombine, fqn, {rows, perm}, {}, a);
}

ValueId ProgramBuilder::rope(const std::string& fqn, ValueId x, int64_t heads, int64_t head_dim,
                             double theta) {
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

ValueId ProgramBuilder::linear_cross_entropy(const std::string& fqn, ValueId x, ParamId weight,
                                             int64_t chunk) {
  const Shape& w = program_.params[weight].shape;
  OpAttrs a;
  a.k = w[1];
  a.n = w[0];
  a.m = numel(shape(x)) / a.k;
  a.chunk = chunk;
  if (a.m * a.k != numel(shape(x)) || chunk < 1) {
    throw std::logic_error("linear_cross_entropy shape mismatch at " + fqn);
  }
  ValueId loss = add_node(OpKind::kLinearCrossEntropy, fqn, {x}, {weight}, a);
  program_.loss = loss;
  return loss;
}

Program ProgramBuilder::finish() { return std::move(program_); }

}  // namespace remat
