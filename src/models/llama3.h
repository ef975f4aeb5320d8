// Llama 3 (torchtitan's llama3): flavors, argument resolution from the job
// config, and the builder of the training program (spec.md §3).
#pragma once

#include <optional>
#include <string>

#include "graph/program.h"
#include "io/config.h"

namespace remat {

struct TransformerArgs {
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;
  std::optional<double> ffn_dim_multiplier;
  int64_t multiple_of = 256;
  double rope_theta = 500000.0;
  float norm_eps = 1e-5f;
  // model.loss_chunk_rows: > 0 fuses the output projection with the loss,
  // that many rows of logits at a time; 0 keeps the logits whole.
  int64_t loss_chunk_rows = 0;

  int64_t head_dim() const { return dim / n_heads; }
  // torchtitan's rule: int(2 * 4 * dim / 3), times the multiplier, rounded
  // up to a multiple of multiple_of.
  int64_t ffn_hidden_dim() const;
};

// The flavor table of spec.md §3 with the config's overrides applied and
// checked (InputError names the key and the constraint).
TransformerArgs resolve_llama3_args(const JobConfig::Model& model);
// InputError naming the first llama4-only key (num_experts, top_k,
// interleave_moe_layer_step, score_func) that `model` sets: a llama3 run
// would ignore it.
void refuse_moe_keys_for_llama3(const JobConfig::Model& model);

Program build_llama3_program(const TransformerArgs& args, int64_t batch, int64_t seq);

}  // namespace remat
