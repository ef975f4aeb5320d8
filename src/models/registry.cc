#include "models/registry.h"

#include "core/error.h"
#include "models/limits.h"
#include "models/llama3.h"
#include "models/llama4.h"

namespace remat {

BuiltModel build_model(const JobConfig::Model& model, int64_t batch, int64_t seq) {
  if (model.name == "llama4") {
    const Llama4Args args = resolve_llama4_args(model);
    check_model_limits(args.base, &args, batch, seq);
    BuiltModel built{build_llama4_program(args, batch, seq), {}};
    ModelSummary& s = built.summary;
    const TransformerArgs& t = args.base;
    s.family = "llama4";
    s.flavor = model.flavor;
    s.params = built.program.num_parameters();
    s.embedding_params = t.vocab_size * t.dim;
    // Per token: everything but the routed experts, plus top_k of them.
    const int64_t routed = args.routed_expert_params();
    s.active_params = s.params - routed + routed / args.num_experts * args.top_k;
    s.n_layers = t.n_layers;
    s.attention_term = t.n_layers * t.n_heads * t.head_dim();
    s.vocab_size = t.vocab_size;
    s.args_json = llama4_args_json(args);
    return built;
  }
  if (model.name != "llama3") {
    throw InputError("config error: model.name = \"" + model.name +
                     "\" is not available in this build (expected \"llama3\" or \"llama4\")");
  }
  const TransformerArgs args = resolve_llama3_args(model);
  check_model_limits(args, nullptr, batch, seq);
  BuiltModel built{build_llama3_program(args, batch, seq), {}};
  ModelSummary& s = built.summary;
  s.family = "llama3";
  s.flavor = model.flavor;
  s.params = built.program.num_parameters();
  s.embedding_params = args.vocab_size * args.dim;
  s.active_params = s.params;
  s.n_layers = args.n_layers;
  s.attention_term = args.n_layers * args.n_heads * args.head_dim();
  s.vocab_size = args.vocab_size;
  s.args_json = transformer_args_json(args);
  return built;
}

}  // namespace remat
