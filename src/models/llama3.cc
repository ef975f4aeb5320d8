#include "models/llama3.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "graph/builder.h"
#include "models/config_errors.h"
#include "models/transformer_parts.h"

namespace remat {

int64_t TransformerArgs::ffn_hidden_dim() const {
  int64_t hidden = 4 * dim;
  hidden = 2 * hidden / 3;
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

namespace {

const std::map<std::string, TransformerArgs>& llama3_flavors() {
  static const std::map<std::string, TransformerArgs> flavors = [] {
    std::map<std::string, TransformerArgs> f;
    f["debugmodel"] = {256, 6, 16, 16, 2048, std::nullopt, 256};
    f["8B"] = {4096, 32, 32, 8, 128256, 1.3, 1024};
    f["70B"] = {8192, 80, 64, 8, 128256, 1.3, 4096};
    f["405B"] = {16384, 126, 128, 8, 128256, 1.2, 4096};
    return f;
  }();
  return flavors;
}

}  // namespace

void refuse_moe_keys_for_llama3(const JobConfig::Model& model) {
  const std::pair<const char*, bool> moe_keys[] = {
      {"num_experts", model.num_experts != 0},
      {"top_k", model.top_k != 0},
      {"interleave_moe_layer_step", model.interleave_moe_layer_step != 0},
      {"score_func", !model.score_func.empty()}};
  for (const auto& [key, set] : moe_keys) {
    require(!set, std::string("model.") + key +
                      " is set, but model.name = \"llama3\" has no mixture-of-experts blocks "
                      "(expected model.name = \"llama4\", or the key left out)");
  }
}

TransformerArgs resolve_llama3_args(const JobConfig::Model& model) {
  TransformerArgs args = find_flavor(llama3_flavors(), "llama3", model.flavor);
  if (model.dim > 0) args.dim = model.dim;
  if (model.n_layers > 0) args.n_layers = model.n_layers;
  if (model.n_heads > 0) args.n_heads = model.n_heads;
  if (model.n_kv_heads > 0) args.n_kv_heads = model.n_kv_heads;
  if (model.vocab_size > 0) args.vocab_size = model.vocab_size;
  if (model.ffn_dim_multiplier > 0) args.ffn_dim_multiplier = model.ffn_dim_multiplier;
  if (model.multiple_of > 0) args.multiple_of = model.multiple_of;
  // "auto" is make_setup's to resolve (planner/setup.h) before it builds the
  // run's program; any other program built from it keeps the logits whole.
  args.loss_chunk_rows =
      model.loss_chunk_rows.automatic ? 0 : static_cast<int64_t>(model.loss_chunk_rows.value);
  require_size_or_flavor("dim", model.dim);
  require_size_or_flavor("n_layers", model.n_layers);
  require_size_or_flavor("n_heads", model.n_heads);
  require_size_or_flavor("n_kv_heads", model.n_kv_heads);
  require_size_or_flavor("vocab_size", model.vocab_size);
  require_size_or_flavor("multiple_of", model.multiple_of);
  require(args.dim % args.n_heads == 0,
          "model.dim = " + std::to_string(args.dim) + " is not divisible by model.n_heads = " +
              std::to_string(args.n_heads) + " (expected dim to be a multiple of n_heads)");
  require(args.head_dim() % 2 == 0, "head_dim = dim / n_heads = " +
                                        std::to_string(args.head_dim()) + " must be even for RoPE");
  require(args.n_heads % args.n_kv_heads == 0,
          "model.n_heads = " + std::to_string(args.n_heads) +
              " is not divisible by model.n_kv_heads = " + std::to_string(args.n_kv_heads) +
              " (expected grouped-query heads: n_heads a multiple of n_kv_heads)");
  return args;
}

Program build_llama3_program(const TransformerArgs& args, int64_t batch, int64_t seq) {
  ProgramBuilder b(batch, seq);
  ValueId x = add_token_embedding(b, args);
  for (int32_t layer = 0; layer < args.n_layers; ++layer) {
    const AttentionHalf half = add_attention_half(b, args, layer, x);
    ValueId f = add_dense_ffn(b, args, layer, half.ffn_input);
    x = b.add("layers." + std::to_string(layer) + ".ffn_residual", half.h, f);
  }
  add_output_and_loss(b, args, x);
  return b.finish();
}

}  // namespace remat
