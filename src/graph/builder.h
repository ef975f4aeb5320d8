// Builds a Program op by op, inferring output shapes, so model code reads
// like the model's forward pass.
#pragma once

#include <string>
#include <utility>

#include "graph/program.h"

namespace remat {

struct MoeDispatched {
  ValueId rows, offsets, perm;
};

class ProgramBuilder {
 public:
  ProgramBuilder(int64_t batch, int64_t seq);

  ParamId param(const std::string& fqn, Shape shape, ParamInit init);
  // A non-trainable tensor (zero-initialised) that ops update themselves.
  ParamId buffer(const std::string& fqn, Shape shape);
  // Nodes added after this belong to block `block` (-1: outside any block).
  void set_block(int32_t block) { block_ = block; }

  ValueId embedding(const std::string& fqn, ParamId table);
  // Returns the normalised output (the rstd statistic is a second output).
  ValueId rmsnorm(const std::string& fqn, ValueId x, ParamId weight, float eps);
  ValueId linear(const std::string& fqn, ValueId x, ParamId weight);
  // y = x @ w with w stored (..., in, out), e.g. (1, dim, hidden).
  ValueId linear_in_out(const std::string& fqn, ValueId x, ParamId weight);
  // MoE (spec.md §3). Returns (top-k scores, expert indices).
  std::pair<ValueId, ValueId> moe_route(const std::string& fqn, ValueId logits, ParamId expert_bias,
                                        ParamId counts, int64_t top_k, bool sigmoid);
  MoeDispatched moe_dispatch(const std::string& fqn, ValueId x, ValueId scores, ValueId indices,
                             int64_t experts);
  ValueId grouped_linear(const std::string& fqn, ValueId rows, ValueId offsets, ParamId weight);
  ValueId moe_combine(const std::string& fqn, ValueId rows, ValueId perm, int64_t top_k);
  ValueId rope(const std::string& fqn, ValueId x, int64_t heads, int64_t head_dim, double theta);
  ValueId attention(const std::string& fqn, ValueId q, ValueId k, ValueId v, int64_t heads,
                    int64_t kv_heads, int64_t head_dim);
  ValueId silu_mul(const std::string& fqn, ValueId a, ValueId b);
  ValueId add(const std::string& fqn, ValueId a, ValueId b);
  // Sets program.loss.
  ValueId cross_entropy(const std::string& fqn, ValueId logits);
  // The output projection and the cross-entropy fused, `chunk` rows of
  // logits at a time (OpKind::kLinearCrossEntropy). Sets program.loss.
  ValueId linear_cross_entropy(const std::string& fqn, ValueId x, ParamId weight, int64_t chunk);

  Program finish();

 private:
  // Appends a node, creates its outputs with inferred shapes, returns output 0.
  ValueId add_node(OpKind kind, const std::string& fqn, std::vector<ValueId> inputs,
                   std::vector<ParamId> params, const OpAttrs& attrs);
  const Shape& shape(ValueId v) const { return program_.values[v].shape; }

  Program program_;
  int32_t block_ = -1;
};

}  // namespace remat
