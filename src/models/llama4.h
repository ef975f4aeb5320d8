// Llama 4 (torchtitan's llama4): Llama 3 attention blocks whose FFN is, every
// interleave_moe_layer_step-th block, a mixture of experts with one shared
// expert and auxiliary-loss-free load balancing (spec.md §3).
#pragma once

#include <string>

#include "graph/program.h"
#include "io/config.h"
#include "models/llama3.h"

namespace remat {

struct Llama4Args {
  TransformerArgs base;  // attention, dense FFN, norms, vocabulary
  int64_t num_experts = 8;
  int64_t top_k = 1;
  int64_t interleave_moe_layer_step = 2;
  bool sigmoid = false;  // score_func: "softmax" (false) or "sigmoid"
  bool auto_scale_hidden_dim = true;
  bool use_shared_expert = true;

  // Block i (0-based) is MoE when (i + 1) % interleave_moe_layer_step == 0.
  bool is_moe_layer(int64_t layer) const { return (layer + 1) % interleave_moe_layer_step == 0; }
  // torchtitan: int(2 * 4 * dim / 3), times the multiplier (then int),
  // divided by top_k + 1 (shared expert) with auto_scale_hidden_dim (then
  // int), rounded up to a multiple of multiple_of.
  int64_t moe_hidden_dim() const;
  int64_t n_moe_layers() const;
  // Parameters of the routed experts (all MoE layers), and the part of them
  // one token uses (top_k / num_experts).
  int64_t routed_expert_params() const;
};

Llama4Args resolve_llama4_args(const JobConfig::Model& model);

Program build_llama4_program(const Llama4Args& args, int64_t batch, int64_t seq);

}  // namespace remat
