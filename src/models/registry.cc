#include "models/registry.h"

#include "core/error.h"
#include "models/limits.h"
#include "models/llama3.h"
#include "models/llama4.h"

namespace remat {

namespace {

// What both families share; a MoE model lowers active_params afterwards.
ModelSummary summarize(const std::string& family, const std::string& flavor, const Program& program,
                       const TransformerArgs& t) {
  ModelSummary s;
  s.family = family;
  s.flavor = flavor;
  s.params = program.num_parameters();
  s.embedding_params = t.vocab_size * t.dim;
  s.active_params = s.params;
  s.n_layers = t.n_layers;
  s.attention_term = t.n_layers * t.n_heads * t.head_dim();
  s.vocab_size = t.vocab_size;
  return s;
}

}  // namespace

int64_t model_flops_per_token(const ModelSummary& summary, int64_t seq_len) {
  return 6 * (summary.active_params - summary.embedding_params) +
         12 * summary.attention_term * seq_len;
}

BuiltModel build_model(const JobConfig::Model& model, int64_t batch, int64_t seq) {
  if (model.name == "llama4") {
    const Llama4Args args = resolve_llama4_args(model);
    check_model_limits(args.base, &args, batch, seq);
    BuiltModel built{build_llama4_program(args, batch, seq), {}};
    ModelSummary& s = built.summary = summarize("llama4", model.flavor, built.program, args.base);
    // Per token: everything but the routed experts, plus top_k of them.
    const int64_t routed = args.routed_expert_params();
    s.active_params = s.params - routed + routed / args.num_experts * args.top_k;
    return built;
  }
  if (model.name != "llama3") {
    throw InputError("config error: model.name = \"" + model.name +
                     "\" is not available in this build (expected \"llama3\" or \"llama4\")");
  }
  refuse_moe_keys_for_llama3(model);
  const TransformerArgs args = resolve_llama3_args(model);
  check_model_limits(args, nullptr, batch, seq);
  BuiltModel built{build_llama3_program(args, batch, seq), {}};
  built.summary = summarize("llama3", model.flavor, built.program, args);
  return built;
}

}  // namespace remat
