#include "models/llama3.h"

#include <cmath>
#include <map>
#include <sstream>

#include "core/error.h"
#include "graph/builder.h"

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

std::string known_flavors() {
  std::string s;
  for (const auto& [name, args] : llama3_flavors()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw InputError("config error: " + message);
}

}  // namespace

TransformerArgs resolve_llama3_args(const JobConfig::Model& model) {
  auto it = llama3_flavors().find(model.flavor);
  require(it != llama3_flavors().end(), "model.flavor = \"" + model.flavor +
                                            "\" is not a llama3 flavor (expected one of: " +
                                            known_flavors() + ")");
  TransformerArgs args = it->second;
  if (model.dim > 0) args.dim = model.dim;
  if (model.n_layers > 0) args.n_layers = model.n_layers;
  if (model.n_heads > 0) args.n_heads = model.n_heads;
  if (model.n_kv_heads > 0) args.n_kv_heads = model.n_kv_heads;
  if (model.vocab_size > 0) args.vocab_size = model.vocab_size;
  if (model.ffn_dim_multiplier > 0) args.ffn_dim_multiplier = model.ffn_dim_multiplier;
  if (model.multiple_of > 0) args.multiple_of = model.multiple_of;
  require(model.dim >= 0 && model.n_layers >= 0 && model.n_heads >= 0 &&
              model.n_kv_heads >= 0 && model.vocab_size >= 0 && model.multiple_of >= 0,
          "model sizes (dim, n_layers, n_heads, n_kv_heads, vocab_size, multiple_of) "
          "must be positive, or 0 for the flavor's value");
  require(args.dim % args.n_heads == 0,
          "model.dim = " + std::to_string(args.dim) + " is not divisible by model.n_heads = " +
              std::to_string(args.n_heads) + " (expected dim to be a multiple of n_heads)");
  require(args.head_dim() % 2 == 0, "head_dim = dim / n_heads = " +
                                        std::to_string(args.head_dim()) +
                                        " must be even for RoPE");
  require(args.n_heads % args.n_kv_heads == 0,
          "model.n_heads = " + std::to_string(args.n_heads) +
              " is not divisible by model.n_kv_heads = " + std::to_string(args.n_kv_heads) +
              " (expected grouped-query heads: n_heads a multiple of n_kv_heads)");
  return args;
}

Program build_llama3_program(const TransformerArgs& args, int64_t batch, int64_t seq) {
  ProgramBuilder b(batch, seq);
  const int64_t dim = args.dim, hd = args.head_dim(), hidden = args.ffn_hidden_dim();
  const ParamInit ones{ParamInit::Kind::kOnes};
  const ParamInit in_proj{ParamInit::Kind::kTruncatedNormal, 0.02, -2, 2};

  ParamId emb = b.param("tok_embeddings.weight", {args.vocab_size, dim},
                        {ParamInit::Kind::kNormal, 1.0});
  ValueId x = b.embedding("tok_embeddings", emb);
  for (int32_t layer = 0; layer < args.n_layers; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    const ParamInit out_proj{ParamInit::Kind::kTruncatedNormal,
                             0.02 / std::sqrt(2.0 * (layer + 1)), -2, 2};
    ParamId attn_norm = b.param(p + "attention_norm.weight", {dim}, ones);
    ParamId wq = b.param(p + "attention.wq.weight", {args.n_heads * hd, dim}, in_proj);
    ParamId wk = b.param(p + "attention.wk.weight", {args.n_kv_heads * hd, dim}, in_proj);
    ParamId wv = b.param(p + "attention.wv.weight", {args.n_kv_heads * hd, dim}, in_proj);
    ParamId wo = b.param(p + "attention.wo.weight", {dim, args.n_heads * hd}, out_proj);
    ParamId ffn_norm = b.param(p + "ffn_norm.weight", {dim}, ones);
    ParamId w1 = b.param(p + "feed_forward.w1.weight", {hidden, dim}, in_proj);
    ParamId w2 = b.param(p + "feed_forward.w2.weight", {dim, hidden}, out_proj);
    ParamId w3 = b.param(p + "feed_forward.w3.weight", {hidden, dim}, out_proj);

    b.set_block(layer);
    ValueId n1 = b.rmsnorm(p + "attention_norm", x, attn_norm, args.norm_eps);
    ValueId q = b.linear(p + "attention.wq", n1, wq);
    ValueId k = b.linear(p + "attention.wk", n1, wk);
    ValueId v = b.linear(p + "attention.wv", n1, wv);
    q = b.rope(p + "attention.rope_q", q, args.n_heads, hd, args.rope_theta);
    k = b.rope(p + "attention.rope_k", k, args.n_kv_heads, hd, args.rope_theta);
    ValueId a = b.attention(p + "attention.sdpa", q, k, v, args.n_heads, args.n_kv_heads, hd);
    ValueId o = b.linear(p + "attention.wo", a, wo);
    ValueId h = b.add(p + "attention_residual", x, o);
    ValueId n2 = b.rmsnorm(p + "ffn_norm", h, ffn_norm, args.norm_eps);
    ValueId g = b.linear(p + "feed_forward.w1", n2, w1);
    ValueId u = b.linear(p + "feed_forward.w3", n2, w3);
    ValueId s = b.silu_mul(p + "feed_forward.silu_mul", g, u);
    ValueId f = b.linear(p + "feed_forward.w2", s, w2);
    x = b.add(p + "ffn_residual", h, f);
  }
  b.set_block(-1);
  ParamId norm = b.param("norm.weight", {dim}, ones);
  const double out_std = 1.0 / std::sqrt(static_cast<double>(dim));
  ParamId out = b.param("output.weight", {args.vocab_size, dim},
                        {ParamInit::Kind::kTruncatedNormal, out_std, -3 * out_std, 3 * out_std});
  ValueId xn = b.rmsnorm("norm", x, norm, args.norm_eps);
  ValueId logits = b.linear("output", xn, out);
  b.cross_entropy("loss", logits);
  return b.finish();
}

std::string transformer_args_json(const TransformerArgs& args) {
  std::ostringstream s;
  s.precision(17);
  s << "{\"dim\": " << args.dim << ", \"n_layers\": " << args.n_layers
    << ", \"n_heads\": " << args.n_heads << ", \"n_kv_heads\": " << args.n_kv_heads
    << ", \"vocab_size\": " << args.vocab_size << ", \"ffn_dim_multiplier\": ";
  if (args.ffn_dim_multiplier) {
    s << *args.ffn_dim_multiplier;
  } else {
    s << "null";
  }
  s << ", \"multiple_of\": " << args.multiple_of << ", \"rope_theta\": " << args.rope_theta
    << ", \"norm_eps\": " << args.norm_eps << "}";
  return s.str();
}

}  // namespace remat
