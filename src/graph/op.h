// Op kinds and what the rest of the engine may know about each, without
// running it: output shapes, FLOPs, which tensors its backward reads, and
// the class the AC policy reasons about (the policy never names an op).
//
// How to add an op (op.cc's static check and the completeness test,
// tests/runtime/op_table_test.cc, fail until every step is done):
//  1. Add its kind to OpKind (before kNumKinds) and its row to the table in
//     op.cc, in enum order: name, class, inputs, outputs, the saved-values
//     masks, output names, output shapes, FLOPs and backward workspace.
//  2. Write its kernels (src/kernels/cpu, declared in kernels.h) and register
//     a forward and a backward for it in the CPU backend's op table
//     (src/runtime/cpu_ops.cc), which unpack OpAttrs and OpBuffers.
//  3. Add its builder call (graph/builder.h), which sets the attrs.
//  4. Add its finite-difference case to fd_cases() in
//     tests/runtime/op_table_test.cc.
//
// The order in which a backward reads its saved values: OpBuffers::inputs of
// a backward call holds the saved values only, first the saved inputs in
// input order, then the saved outputs in output order (saved_values() in
// ac/plan.h builds that list from saved_inputs / saved_outputs). E.g.
// attention saves inputs 0b111 and outputs 0b11, so its backward reads
// [q, k, v, out, lse]; rmsnorm saves input 0 and output 1, so it reads
// [x, rstd]. The gradient of output 0 is OpBuffers::grad_output; other
// outputs get no gradient.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace remat {

enum class OpKind {
  kEmbedding,     // (tokens) -> [rows, dim]                     params: table
  kRmsNorm,       // x -> out, rstd[rows]                          params: weight
  kLinear,        // x[m, k] -> y[m, n]                            params: w[n, k]
  kRope,          // x[b, s, h, d] -> rotated
  kAttention,     // q, k, v -> out, lse[b, h, s]
  kSiluMul,       // a, b -> silu(a) * b
  kAdd,           // a, b -> a + b
  kCrossEntropy,  // logits[rows, vocab] (targets) -> loss[1], lse[rows]
  // Mixture of experts (spec.md §3). Expert ids and row permutations travel
  // as exact floats so that every value is an fp32 tensor.
  kMoeRoute,       // logits[T, E] -> scores[T, k], indices[T, k]    params: expert_bias, counts
  kMoeDispatch,    // x[T, D], scores, indices -> rows[T*k, D], offsets[E+1], perm[T*k]
  kGroupedLinear,  // rows[N, K], offsets[E+1] -> out[N, n]           params: w[E, K, n]
  kMoeCombine,     // rows[T*k, D], perm[T*k] -> y[T, D]
  // The output projection and the cross-entropy in one op, the logits made
  // `chunk` rows at a time and never kept (model.loss_chunk_rows).
  kLinearCrossEntropy,  // x[m, k] (targets) -> loss[1], lse[m]     params: w[n, k]
  kNumKinds,            // not an op: the number of kinds
};
constexpr int kNumOpKinds = static_cast<int>(OpKind::kNumKinds);
constexpr int kMaxOpOutputs = 3;

// What the AC policy reasons about.
enum class OpClass {
  kMatmul,         // a projection: candidates for "save every other matmul"
  kAttentionCore,  // always kept by op-level AC (output and statistics)
  kOther,          // cheap to recompute
};

// The dimensions a kernel needs; which fields are used depends on the kind.
struct OpAttrs {
  int64_t m = 0, k = 0, n = 0;  // linear: rows, in, out
  int64_t rows = 0, dim = 0;    // embedding, norm, elementwise, CE
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double theta = 0;  // rope
  // rope, attention: the position of row 0 of each sequence. 0 in every
  // program; > 0 only when decoding with a KV cache (generate/decoder.h), where
  // attention's k and v inputs hold position + seq rows per sequence.
  int64_t position = 0;
  float eps = 0;  // rmsnorm
  // linear: the weight is stored (in, out) = [k, n] instead of PyTorch's
  // [n, k] (torchtitan's expert layout, used for the MoE shared expert).
  bool weight_in_out = false;
  int64_t experts = 0, top_k = 0;  // MoE ops (rows = tokens, dim = D)
  bool sigmoid = false;            // MoE route: score function
  int64_t chunk = 0;               // linear_cross_entropy: rows of logits at a time
  // The program's compute dtype (set_compute_dtype), for scratch sizes that
  // depend on it.
  DType compute = DType::kF32;
};

// One row of the op table.
struct OpInfo {
  OpKind kind;
  const char* name;
  OpClass op_class;
  int num_inputs;
  int num_outputs;
  // Bitmasks of the inputs / outputs the backward reads (bit i = index i).
  uint32_t saved_inputs;
  uint32_t saved_outputs;
  // The backward turns input 0 into its own gradient in place (cross-entropy:
  // dlogits overwrites logits, so no second copy of the logits ever exists).
  bool grad_in_place_of_input0;
  // The op's outputs are decisions that must never be re-made: every plan
  // keeps them (when anything reads them), whatever the policy wished, so a
  // recompute never re-runs the op (MoE routing survives recompute).
  bool outputs_always_kept;
  // Value name suffix of each output (e.g. ":out", ":rstd").
  std::array<const char*, kMaxOpOutputs> output_suffixes;
  std::vector<Shape> (*output_shapes)(const OpAttrs&);
  // Model FLOPs of the forward: matrix multiplications only (projections and
  // the attention core), the convention MFU uses; pointwise ops count 0.
  // Attention counts the full (non-causal) score matrix, as torchtitan's
  // 12*L*H*D*S term does. The backward counts twice the forward.
  int64_t (*flops)(const OpAttrs&);
  // Scratch the backward kernel needs, in bytes (accounted as temporaries).
  int64_t (*workspace_bytes)(const OpAttrs&);
  // Under bf16 compute (Program::compute_dtype), the outputs and inputs
  // (bitmasks as above) that stay fp32: statistics (rstd, lse), the loss and
  // its input, routing decisions and exact-float indices. Every other value
  // is stored in the compute dtype.
  uint32_t fp32_outputs = 0;
  uint32_t fp32_inputs = 0;
  // Scratch the forward kernel needs, in bytes (accounted as temporaries
  // for the op's step); null: none.
  int64_t (*forward_workspace_bytes)(const OpAttrs&) = nullptr;
  // The backward re-runs the forward's matmuls (the fused loss head rebuilds
  // its logits): its FLOPs are counted as recompute, beside backward_flops.
  bool backward_recomputes_forward = false;
  // Every input's gradient is the output's gradient itself (a sum): the
  // backward hands the output gradient's buffer to the first input whose
  // gradient no one has written yet (read once by the op), instead of
  // copying it into a new one (llm.c's residual stream does the same). One
  // activation-sized buffer fewer, and one write fewer, per add.
  bool grad_output_becomes_input_grad = false;
  // Saved inputs (bitmask) whose buffer the backward may overwrite with
  // their own gradient where the schedule would free them after this step
  // anyway (Step::grads_over_inputs): the kernel reads each element before
  // writing its gradient in the same place (silu_mul's a and b), or has
  // finished reading it (a linear's x, a grouped linear's rows: dW is made
  // before dx). Three activation-sized buffers fewer at the FFN's backward,
  // where AC modes peaked.
  uint32_t grads_over_saved_inputs = 0;
};

const OpInfo& op_info(OpKind kind);

struct Node;
// Output shapes for a node whose attrs are set.
std::vector<Shape> infer_output_shapes(const Node& node);
int64_t forward_flops(const Node& node);
int64_t backward_flops(const Node& node);
int64_t backward_workspace_bytes(const Node& node);
int64_t forward_workspace_bytes(const Node& node);
// FLOPs a backward spends re-running its own forward (0 for most ops).
int64_t backward_recompute_flops(const Node& node);

}  // namespace remat
