#include "models/limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "models/config_errors.h"

namespace remat {

namespace {

constexpr double kMaxDim = 2147483647.0;                 // 2^31 - 1: any two multiply in int64
constexpr double kMaxTensorElements = 1099511627776.0;   // 2^40
constexpr double kMaxParams = 17592186044416.0;          // 2^44
constexpr double kMaxStepFlops = 4611686018427387904.0;  // 2^62
constexpr double kMaxTokens = 2147483647.0;              // batch x seq_len
constexpr double kMaxMoeSlots = 16777216.0;              // 2^24: exact in fp32

std::string number(double v) {
  char text[64];
  if (v < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", v);
  } else {
    std::snprintf(text, sizeof text, "%.3g", v);
  }
  return text;
}

void require_dim(int64_t value, const char* key) {
  require(static_cast<double>(value) <= kMaxDim, std::string(key) + " = " + std::to_string(value) +
                                                     " is too large (expected at most 2147483647)");
}

// torchtitan's hidden size rule in double: int(8 * dim / 3), times the
// multiplier; the caller rounds it up to multiple_of.
double ffn_base(double dim, const std::optional<double>& multiplier) {
  double hidden = std::floor(2.0 * (4.0 * dim) / 3.0);
  if (multiplier) hidden = std::floor(*multiplier * hidden);
  return hidden;
}

double round_up(double value, double multiple) { return std::ceil(value / multiple) * multiple; }

void require_tensor(double elements, const std::string& what) {
  require(elements <= kMaxTensorElements,
          what + " would hold " + number(elements) +
              " elements, more than remat's limit of 2^40 per tensor (4 TiB in fp32); "
              "use smaller model sizes, local_batch_size or seq_len");
}

}  // namespace

void check_model_limits(const TransformerArgs& args, const Llama4Args* moe, int64_t batch,
                        int64_t seq) {
  const double dim = static_cast<double>(args.dim), layers = static_cast<double>(args.n_layers);
  const double vocab = static_cast<double>(args.vocab_size);
  require_dim(args.dim, "model.dim");
  require_dim(args.n_heads, "model.n_heads");
  require_dim(args.n_kv_heads, "model.n_kv_heads");
  require_dim(args.vocab_size, "model.vocab_size");
  require_dim(args.multiple_of, "model.multiple_of");
  require(args.n_layers <= kMaxLayers,
          "model.n_layers = " + std::to_string(args.n_layers) + " is too large (expected at most " +
              std::to_string(kMaxLayers) + "; the largest Llama has 126)");
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq);
  require(tokens <= kMaxTokens, "training.local_batch_size x training.seq_len = " + number(tokens) +
                                    " tokens per step, expected at most 2^31 - 1");

  const double base = ffn_base(dim, args.ffn_dim_multiplier);
  const double multiple = static_cast<double>(args.multiple_of);
  require(base >= 1 && base <= kMaxTensorElements,
          "model.ffn_dim_multiplier makes the FFN hidden size int(" +
              number(std::floor(8.0 * dim / 3.0)) + " x multiplier) = " + number(base) +
              ", expected between 1 and 2^40 (a multiplier near 1, such as 1.3)");
  const double hidden = round_up(base, multiple);
  const double kv_dim =
      static_cast<double>(args.n_kv_heads) * (dim / static_cast<double>(args.n_heads));

  double layer_params = 2 * dim * dim + 2 * dim * kv_dim + 3 * dim * hidden + 2 * dim;
  double layer_activations = tokens * std::max({dim, hidden, kv_dim});
  double step_forward_flops = 2 * tokens * layer_params * layers;
  require_tensor(vocab * dim, "tok_embeddings.weight (vocab_size x dim)");
  require_tensor(dim * hidden, "a feed-forward weight (dim x hidden)");
  require_tensor(layer_activations, "an activation (tokens x hidden)");
  require_tensor(tokens * vocab, "the logits (tokens x vocab_size)");

  if (moe != nullptr) {
    const double experts = static_cast<double>(moe->num_experts);
    const double top_k = static_cast<double>(moe->top_k);
    require_dim(moe->num_experts, "model.num_experts");
    require(
        tokens * top_k <= kMaxMoeSlots,
        "training.local_batch_size x training.seq_len x model.top_k = " + number(tokens * top_k) +
            ", expected at most 2^24 (MoE routing stores token slots as exact fp32 integers)");
    double moe_base = base;
    if (moe->auto_scale_hidden_dim)
      moe_base = std::floor(moe_base / (top_k + (moe->use_shared_expert ? 1 : 0)));
    require(moe_base >= 1,
            "the MoE expert hidden size is 0 (model.ffn_dim_multiplier, model.top_k)");
    const double moe_hidden = round_up(moe_base, multiple);
    require_tensor(experts * dim * moe_hidden, "an expert weight (num_experts x dim x hidden)");
    require_tensor(tokens * top_k * moe_hidden, "an expert activation (tokens x top_k x hidden)");
    // MoE layers replace the dense FFN by experts, a router and a shared expert.
    const double moe_layer = 3 * dim * moe_hidden * (experts + 1) + experts * dim;
    layer_params += moe_layer;  // an upper bound: counts both kinds of FFN
    step_forward_flops += 2 * tokens * (3 * dim * moe_hidden * (top_k + 1)) * layers;
  }
  const double params = layers * layer_params + 2 * vocab * dim;
  require(params <= kMaxParams, "the model would have about " + number(params) +
                                    " parameters, more than remat's limit of 2^44");
  const double heads = static_cast<double>(args.n_heads);
  step_forward_flops +=
      2 * tokens * vocab * dim + 4 * static_cast<double>(batch) * heads * static_cast<double>(seq) *
                                     static_cast<double>(seq) * (dim / heads) * layers;
  // Forward, backward (2x) and recompute (at most one more forward).
  require(4 * step_forward_flops <= kMaxStepFlops,
          "one training step would take about " + number(4 * step_forward_flops) +
              " FLOPs, more than remat's limit of 2^62; use a smaller model, "
              "local_batch_size or seq_len");
}

}  // namespace remat
