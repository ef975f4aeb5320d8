#include "models/registry.h"

#include "core/error.h"
#include "models/llama3.h"

namespace remat {

BuiltModel build_model(const JobConfig::Model& model, int64_t batch, int64_t seq) {
  if (model.name != "llama3") {
    throw InputError("config error: model.name = \"" + model.name +
                     "\" is not available in this build (expected \"llama3\")");
  }
  const TransformerArgs args = resolve_llama3_args(model);
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
