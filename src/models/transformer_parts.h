// The pieces Llama 3 and Llama 4 share, written once: embedding, the
// attention half of a block, the dense SwiGLU FFN, and the output head with
// the loss. Parameter FQNs and initialisation are torchtitan's.
#pragma once

#include <string>

#include "graph/builder.h"
#include "models/llama3.h"

namespace remat {

ParamInit in_projection_init();                // trunc normal, std 0.02
ParamInit out_projection_init(int32_t layer);  // std 0.02 / sqrt(2 (layer + 1))

ValueId add_token_embedding(ProgramBuilder& b, const TransformerArgs& args);

struct AttentionHalf {
  ValueId h;          // x + wo(attention(...)): the residual after attention
  ValueId ffn_input;  // ffn_norm(h)
};
// Registers the block's attention and ffn_norm parameters, enters the block
// and builds it up to the FFN's input.
AttentionHalf add_attention_half(ProgramBuilder& b, const TransformerArgs& args, int32_t layer,
                                 ValueId x);

// w2(silu(w1(x)) * w3(x)) with "layers.<layer>.feed_forward.*" parameters.
ValueId add_dense_ffn(ProgramBuilder& b, const TransformerArgs& args, int32_t layer, ValueId x);

// Leaves the blocks: norm -> output -> cross-entropy, or norm -> the two
// fused (args.loss_chunk_rows > 0).
void add_output_and_loss(ProgramBuilder& b, const TransformerArgs& args, ValueId x);

}  // namespace remat
