// One entry point from a job config's [model] section to a program: picks
// the model family, resolves and checks its arguments, and summarises it.
#pragma once

#include <string>

#include "graph/program.h"
#include "io/config.h"

namespace remat {

struct ModelSummary {
  std::string family;  // "llama3" | "llama4"
  std::string flavor;
  int64_t params = 0;  // trainable parameters
  int64_t embedding_params = 0;
  int64_t active_params = 0;  // per token (MoE: shared + routed top_k share)
  int64_t n_layers = 0;
  int64_t attention_term = 0;  // layers * heads * head_dim (FLOPs formula)
  int64_t vocab_size = 0;
};

// Model FLOPs per token at `seq_len` (spec.md §4), as torchtitan counts them:
// 6 * (active parameters - embedding parameters) + 12 * attention_term * seq_len.
int64_t model_flops_per_token(const ModelSummary& summary, int64_t seq_len);

struct BuiltModel {
  Program program;
  ModelSummary summary;
};

// InputError for an unknown family or flavor, or arguments that do not fit.
BuiltModel build_model(const JobConfig::Model& model, int64_t batch, int64_t seq);

}  // namespace remat
