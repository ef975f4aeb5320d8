#include "models/llama4.h"

#include <cmath>
#include <map>

#include "graph/builder.h"
#include "models/config_errors.h"
#include "models/transformer_parts.h"

namespace remat {

int64_t Llama4Args::moe_hidden_dim() const {
  int64_t hidden = 2 * (4 * base.dim) / 3;
  if (base.ffn_dim_multiplier) hidden = static_cast<int64_t>(*base.ffn_dim_multiplier * hidden);
  if (auto_scale_hidden_dim) hidden /= top_k + (use_shared_expert ? 1 : 0);
  const int64_t m = base.multiple_of;
  return m * ((hidden + m - 1) / m);
}

int64_t Llama4Args::n_moe_layers() const {
  int64_t n = 0;
  for (int64_t i = 0; i < base.n_layers; ++i) n += is_moe_layer(i);
  return n;
}

int64_t Llama4Args::routed_expert_params() const {
  return n_moe_layers() * num_experts * 3 * base.dim * moe_hidden_dim();
}

namespace {

Llama4Args flavor(TransformerArgs base, int64_t experts, int64_t top_k, int64_t interleave) {
  Llama4Args a;
  a.base = base;
  a.num_experts = experts;
  a.top_k = top_k;
  a.interleave_moe_layer_step = interleave;
  return a;
}

const std::map<std::string, Llama4Args>& llama4_flavors() {
  static const std::map<std::string, Llama4Args> flavors = [] {
    std::map<std::string, Llama4Args> f;
    f["debugmodel"] = flavor({256, 6, 16, 16, 2048, std::nullopt, 256}, 8, 1, 2);
    f["17bx16e"] = flavor({5120, 48, 40, 8, 202048, 1.2, 2048}, 16, 1, 1);
    f["17bx128e"] = flavor({5120, 48, 40, 8, 202048, 1.2, 2048}, 128, 1, 2);
    return f;
  }();
  return flavors;
}

}  // namespace

Llama4Args resolve_llama4_args(const JobConfig::Model& model) {
  Llama4Args args = find_flavor(llama4_flavors(), "llama4", model.flavor);
  // The dense part resolves as Llama 3's does (same overrides and checks).
  JobConfig::Model dense = model;
  dense.flavor = "debugmodel";  // any llama3 flavor: every field is overridden below
  // 0 takes the llama4 flavor's value; anything else, negatives too, goes to
  // resolve_llama3_args as given, which refuses what is not a size.
  dense.dim = model.dim != 0 ? model.dim : args.base.dim;
  dense.n_layers = model.n_layers != 0 ? model.n_layers : args.base.n_layers;
  dense.n_heads = model.n_heads != 0 ? model.n_heads : args.base.n_heads;
  dense.n_kv_heads = model.n_kv_heads != 0 ? model.n_kv_heads : args.base.n_kv_heads;
  dense.vocab_size = model.vocab_size != 0 ? model.vocab_size : args.base.vocab_size;
  dense.multiple_of = model.multiple_of != 0 ? model.multiple_of : args.base.multiple_of;
  const auto multiplier = model.ffn_dim_multiplier > 0
                              ? std::optional<double>(model.ffn_dim_multiplier)
                              : args.base.ffn_dim_multiplier;
  dense.ffn_dim_multiplier = 0;
  args.base = resolve_llama3_args(dense);
  args.base.ffn_dim_multiplier = multiplier;

  require_size_or_flavor("num_experts", model.num_experts);
  require_size_or_flavor("top_k", model.top_k);
  require_size_or_flavor("interleave_moe_layer_step", model.interleave_moe_layer_step);
  if (model.num_experts > 0) args.num_experts = model.num_experts;
  if (model.top_k > 0) args.top_k = model.top_k;
  if (model.interleave_moe_layer_step > 0) {
    args.interleave_moe_layer_step = model.interleave_moe_layer_step;
  }
  if (!model.score_func.empty()) args.sigmoid = model.score_func == "sigmoid";
  // torchtitan builds such a model without a word: every block dense, a
  // Llama 3 under another name. Asked for by mistake far more often than
  // on purpose (a small --model.n_layers under the flavor's interleave).
  require(args.interleave_moe_layer_step <= args.base.n_layers,
          "model.interleave_moe_layer_step = " + std::to_string(args.interleave_moe_layer_step) +
              " with n_layers = " + std::to_string(args.base.n_layers) +
              " gives the llama4 model no MoE block (block i is MoE when (i + 1) is a multiple "
              "of the step; expected a step of at most n_layers, or model.name = \"llama3\" "
              "for a dense model)");
  require(args.top_k <= args.num_experts,
          "model.top_k = " + std::to_string(args.top_k) + " exceeds model.num_experts = " +
              std::to_string(args.num_experts) + " (expected 1 <= top_k <= num_experts)");
  return args;
}

Program build_llama4_program(const Llama4Args& args, int64_t batch, int64_t seq) {
  const TransformerArgs& t = args.base;
  ProgramBuilder b(batch, seq);
  const int64_t dim = t.dim;
  const int64_t moe_hidden = args.moe_hidden_dim(), experts = args.num_experts;

  ValueId x = add_token_embedding(b, t);
  for (int32_t layer = 0; layer < t.n_layers; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    const ParamInit in_proj = in_projection_init();
    const ParamInit out_proj = out_projection_init(layer);
    const AttentionHalf half = add_attention_half(b, t, layer, x);
    const ValueId n2 = half.ffn_input, h = half.h;
    ValueId f;
    if (args.is_moe_layer(layer)) {
      // torchtitan's init: router and w2/w3 depth-scaled, w1 0.02.
      const std::string m = p + "moe.";
      ParamId gate = b.param(m + "router.gate.weight", {experts, dim}, out_proj);
      ParamId bias = b.buffer(m + "expert_bias", {experts});
      ParamId counts = b.buffer(m + "tokens_per_expert", {experts});
      ParamId w1 = b.param(m + "experts.w1", {experts, dim, moe_hidden}, in_proj);
      ParamId w2 = b.param(m + "experts.w2", {experts, moe_hidden, dim}, out_proj);
      ParamId w3 = b.param(m + "experts.w3", {experts, dim, moe_hidden}, out_proj);
      ValueId logits = b.linear(m + "router.gate", n2, gate);
      auto [scores, indices] =
          b.moe_route(m + "router", logits, bias, counts, args.top_k, args.sigmoid);
      MoeDispatched d = b.moe_dispatch(m + "dispatch", n2, scores, indices, experts);
      ValueId g = b.grouped_linear(m + "experts.w1", d.rows, d.offsets, w1);
      ValueId u = b.grouped_linear(m + "experts.w3", d.rows, d.offsets, w3);
      ValueId s = b.silu_mul(m + "experts.silu_mul", g, u);
      ValueId r = b.grouped_linear(m + "experts.w2", s, d.offsets, w2);
      f = b.moe_combine(m + "combine", r, d.perm, args.top_k);
      if (args.use_shared_expert) {
        // torchtitan's shared expert: grouped experts with one expert.
        ParamId sw1 = b.param(m + "shared_expert.w1", {1, dim, moe_hidden}, in_proj);
        ParamId sw2 = b.param(m + "shared_expert.w2", {1, moe_hidden, dim}, out_proj);
        ParamId sw3 = b.param(m + "shared_expert.w3", {1, dim, moe_hidden}, out_proj);
        ValueId sg = b.linear_in_out(m + "shared_expert.w1", n2, sw1);
        ValueId su = b.linear_in_out(m + "shared_expert.w3", n2, sw3);
        ValueId ss = b.silu_mul(m + "shared_expert.silu_mul", sg, su);
        ValueId sh = b.linear_in_out(m + "shared_expert.w2", ss, sw2);
        f = b.add(m + "shared_add", f, sh);
      }
    } else {
      f = add_dense_ffn(b, t, layer, n2);
    }
    x = b.add(p + "ffn_residual", h, f);
  }
  add_output_and_loss(b, t, x);
  return b.finish();
}

}  // namespace remat
