#include "models/transformer_parts.h"

#include <cmath>

namespace remat {

namespace {
std::string layer_prefix(int32_t layer) { return "layers." + std::to_string(layer) + "."; }
}  // namespace

ParamInit in_projection_init() { return {ParamInit::Kind::kTruncatedNormal, 0.02, -2, 2}; }

ParamInit out_projection_init(int32_t layer) {
  return {ParamInit::Kind::kTruncatedNormal, 0.02 / std::sqrt(2.0 * (layer + 1)), -2, 2};
}

ValueId add_token_embedding(ProgramBuilder& b, const TransformerArgs& args) {
  ParamId emb = b.param("tok_embeddings.weight", {args.vocab_size, args.dim},
                        {ParamInit::Kind::kNormal, 1.0});
  return b.embedding("tok_embeddings", emb);
}

AttentionHalf add_attention_half(ProgramBuilder& b, const TransformerArgs& args, int32_t layer,
                                 ValueId x) {
  const std::string p = layer_prefix(layer);
  const int64_t dim = args.dim, hd = args.head_dim();
  const ParamInit ones{ParamInit::Kind::kOnes};
  ParamId attn_norm = b.param(p + "attention_norm.weight", {dim}, ones);
  ParamId wq = b.param(p + "attention.wq.weight", {args.n_heads * hd, dim}, in_projection_init());
  ParamId wk =
      b.param(p + "attention.wk.weight", {args.n_kv_heads * hd, dim}, in_projection_init());
  ParamId wv =
      b.param(p + "attention.wv.weight", {args.n_kv_heads * hd, dim}, in_projection_init());
  ParamId wo =
      b.param(p + "attention.wo.weight", {dim, args.n_heads * hd}, out_projection_init(layer));
  ParamId ffn_norm = b.param(p + "ffn_norm.weight", {dim}, ones);

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
  return {h, b.rmsnorm(p + "ffn_norm", h, ffn_norm, args.norm_eps)};
}

ValueId add_dense_ffn(ProgramBuilder& b, const TransformerArgs& args, int32_t layer, ValueId x) {
  const std::string p = layer_prefix(layer) + "feed_forward.";
  const int64_t dim = args.dim, hidden = args.ffn_hidden_dim();
  ParamId w1 = b.param(p + "w1.weight", {hidden, dim}, in_projection_init());
  ParamId w2 = b.param(p + "w2.weight", {dim, hidden}, out_projection_init(layer));
  ParamId w3 = b.param(p + "w3.weight", {hidden, dim}, out_projection_init(layer));
  ValueId g = b.linear(p + "w1", x, w1);
  ValueId u = b.linear(p + "w3", x, w3);
  ValueId s = b.silu_mul(p + "silu_mul", g, u);
  return b.linear(p + "w2", s, w2);
}

void add_output_and_loss(ProgramBuilder& b, const TransformerArgs& args, ValueId x) {
  b.set_block(-1);
  ParamId norm = b.param("norm.weight", {args.dim}, {ParamInit::Kind::kOnes});
  const double out_std = 1.0 / std::sqrt(static_cast<double>(args.dim));
  ParamId out = b.param("output.weight", {args.vocab_size, args.dim},
                        {ParamInit::Kind::kTruncatedNormal, out_std, -3 * out_std, 3 * out_std});
  ValueId xn = b.rmsnorm("norm", x, norm, args.norm_eps);
  if (args.loss_chunk_rows > 0) {
    // One op named for the projection, so its weight, the matmul log and
    // per_op_sac patterns see "output" either way.
    b.linear_cross_entropy("output", xn, out, args.loss_chunk_rows);
    return;
  }
  ValueId logits = b.linear("output", xn, out);
  b.cross_entropy("loss", logits);
}

}  // namespace remat
