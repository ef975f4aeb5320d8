#include "runtime/cpu_ops.h"

#include <iterator>
#include <stdexcept>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"

namespace remat {

namespace {

struct CpuKernels {
  OpKind kind;
  double (*forward)(const OpAttrs& a, const OpBuffers& b);
  void (*backward)(const OpAttrs& a, const OpBuffers& b);
  // The input gradients the backward overwrites when they are fresh
  // (Backend::fresh_grad_inputs): every one it produces. Inputs that get no
  // gradient (MoE offsets, expert ids) are left out: their buffers stay zeroed.
  uint32_t fresh_grads = 0;
};

using A = const OpAttrs&;
using B = const OpBuffers&;

// A bf16 buffer travels as the same pointer (OpBuffers).
const cpu::bf16* bf16_in(const float* p) { return reinterpret_cast<const cpu::bf16*>(p); }
// The fresh bits of a kernel whose gradient arguments are the op's first
// `inputs` input gradients, then its parameter gradients (kernels.h).
uint32_t fresh_bits(B b, int inputs) {
  return (b.fresh_grad_inputs & ((1u << inputs) - 1)) | (b.fresh_grad_params << inputs);
}
bool fresh_param(B b, size_t i) { return ((b.fresh_grad_params >> i) & 1) != 0; }
bool fresh_input(B b, size_t i) { return ((b.fresh_grad_inputs >> i) & 1) != 0; }
bool bf16_call(B b) { return b.param_dtype == DType::kBF16; }
bool bf16_output(B b, size_t i) {
  return i < b.output_dtypes.size() && b.output_dtypes[i] == DType::kBF16;
}
bool bf16_input(B b, size_t i) {
  return i < b.input_dtypes.size() && b.input_dtypes[i] == DType::kBF16;
}
// A Bf16Use::kActivations op runs its bf16 kernels when any of its
// activations is bf16 (they take each operand in its own dtype).
bool bf16_values(B b) {
  for (DType d : b.input_dtypes) {
    if (d == DType::kBF16) return true;
  }
  for (DType d : b.output_dtypes) {
    if (d == DType::kBF16) return true;
  }
  return false;
}
cpu::ActIn act_in(B b, size_t i) { return {b.inputs[i], bf16_input(b, i)}; }
cpu::ActOut act_out(B b, size_t i) { return {b.outputs[i], bf16_output(b, i)}; }

// The fused loss head's projection of one chunk of rows, on the operands
// the executor hands it: bf16 x and weights on the bf16 GEMMs (the logit
// gradient narrowed to bf16 behind the chunk in the backward's workspace,
// as the unfused head's bf16 copy of dy), bf16 x with the fp32 weights on
// the fallback, or fp32 (kLinear's three paths).
cpu::LossHeadProjection loss_head(A a, B b, float* dx, float* dw) {
  const int64_t k = a.k, n = a.n;
  if (bf16_call(b)) {
    const cpu::bf16* x = bf16_in(b.inputs[0]);
    const cpu::bf16* w = bf16_in(b.params[0]);
    auto* dy = reinterpret_cast<cpu::bf16*>(
        b.workspace + cpu::linear_cross_entropy_scratch_floats(a.m, n, a.chunk));
    return {[=](int64_t r0, int64_t m, float* logits) {
              cpu::linear_bf16_forward(x + r0 * k, w, false, m, k, n, logits, false);
            },
            [=](int64_t r0, int64_t m, float* dlogits, uint32_t fresh) {
              cpu::narrow_to_bf16(dlogits, m * n, dy);
              cpu::linear_bf16_backward(dy, x + r0 * k, w, false, m, k, n, dx + r0 * k, dw,
                                        (fresh & 2) != 0, (fresh & 1) != 0);
            }};
  }
  if (bf16_input(b, 0)) {
    const cpu::bf16* x = bf16_in(b.inputs[0]);
    const float* w = b.params[0];
    return {[=](int64_t r0, int64_t m, float* logits) {
              cpu::linear_act_forward({x + r0 * k, true}, w, false, m, k, n, {logits, false});
            },
            [=](int64_t r0, int64_t m, float* dlogits, uint32_t fresh) {
              cpu::linear_act_backward(dlogits, {x + r0 * k, true}, w, false, m, k, n, dx + r0 * k,
                                       dw, fresh);
            }};
  }
  return cpu::fp32_loss_head(b.inputs[0], b.params[0], k, n, dx, dw);
}

// Indexed by OpKind (checked at compile time). A backward's b.inputs are the
// saved values in op.h's order; the comments name them.
constexpr CpuKernels kCpuKernels[] = {
    {OpKind::kEmbedding,
     [](A a, B b) {
       cpu::embedding_forward(b.tokens, a.rows, b.params[0], a.dim, b.outputs[0]);
       return 0.0;
     },
     [](A a, B b) {
       cpu::embedding_backward(b.tokens, a.rows, b.grad_output, a.dim, a.n, b.grad_params[0],
                               b.fresh_grad_params & 1);
     }},
    {OpKind::kRmsNorm,
     [](A a, B b) {
       if (bf16_values(b)) {
         cpu::rmsnorm_forward_act(act_in(b, 0), b.params[0], a.rows, a.dim, a.eps, act_out(b, 0),
                                  b.outputs[1]);
       } else {
         cpu::rmsnorm_forward(b.inputs[0], b.params[0], a.rows, a.dim, a.eps, b.outputs[0],
                              b.outputs[1]);
       }
       return 0.0;
     },
     [](A a, B b) {  // saved: x, rstd
       if (bf16_values(b)) {
         cpu::rmsnorm_backward_act(b.grad_output, act_in(b, 0), b.params[0], b.inputs[1], a.rows,
                                   a.dim, b.grad_inputs[0], b.grad_params[0], fresh_param(b, 0),
                                   fresh_input(b, 0));
       } else {
         cpu::rmsnorm_backward(b.grad_output, b.inputs[0], b.params[0], b.inputs[1], a.rows, a.dim,
                               b.grad_inputs[0], b.grad_params[0], fresh_bits(b, 1));
       }
     },
     0b1},
    {OpKind::kLinear,
     [](A a, B b) {
       if (bf16_call(b)) {
         cpu::linear_bf16_forward(bf16_in(b.inputs[0]), bf16_in(b.params[0]), a.weight_in_out, a.m,
                                  a.k, a.n, b.outputs[0], bf16_output(b, 0));
       } else if (bf16_values(b)) {
         cpu::linear_act_forward(act_in(b, 0), b.params[0], a.weight_in_out, a.m, a.k, a.n,
                                 act_out(b, 0));
       } else if (a.weight_in_out) {
         cpu::linear_in_out_forward(b.inputs[0], b.params[0], a.m, a.k, a.n, b.outputs[0]);
       } else {
         cpu::linear_forward(b.inputs[0], b.params[0], a.m, a.k, a.n, b.outputs[0]);
       }
       return 0.0;
     },
     [](A a, B b) {         // saved: x
       if (bf16_call(b)) {  // dx's first writer overwrites it (no memset first)
         cpu::linear_bf16_backward(bf16_in(b.grad_output), bf16_in(b.inputs[0]),
                                   bf16_in(b.params[0]), a.weight_in_out, a.m, a.k, a.n,
                                   b.grad_inputs[0], b.grad_params[0], fresh_param(b, 0),
                                   fresh_input(b, 0));
       } else if (bf16_values(b)) {
         cpu::linear_act_backward(b.grad_output, act_in(b, 0), b.params[0], a.weight_in_out, a.m,
                                  a.k, a.n, b.grad_inputs[0], b.grad_params[0], fresh_bits(b, 1));
       } else if (a.weight_in_out) {
         cpu::linear_in_out_backward(b.grad_output, b.inputs[0], b.params[0], a.m, a.k, a.n,
                                     b.grad_inputs[0], b.grad_params[0], fresh_bits(b, 1));
       } else {
         cpu::linear_backward(b.grad_output, b.inputs[0], b.params[0], a.m, a.k, a.n,
                              b.grad_inputs[0], b.grad_params[0], fresh_bits(b, 1));
       }
     },
     0b1},
    {OpKind::kRope,
     [](A a, B b) {
       if (bf16_values(b)) {
         cpu::rope_forward_act(act_in(b, 0), a.batch, a.seq, a.position, a.heads, a.head_dim,
                               a.theta, act_out(b, 0));
       } else {
         cpu::rope_forward_from(b.inputs[0], a.batch, a.seq, a.position, a.heads, a.head_dim,
                                a.theta, b.outputs[0]);
       }
       return 0.0;
     },
     [](A a, B b) {
       cpu::rope_backward(b.grad_output, a.batch, a.seq, a.heads, a.head_dim, a.theta,
                          b.grad_inputs[0], b.fresh_grad_inputs);
     },
     0b1},
    {OpKind::kAttention,
     [](A a, B b) {
       if (bf16_values(b)) {
         cpu::attention_forward_act(act_in(b, 0), act_in(b, 1), act_in(b, 2), a.batch, a.seq,
                                    a.position, a.heads, a.kv_heads, a.head_dim, act_out(b, 0),
                                    b.outputs[1]);
       } else {
         cpu::attention_forward_cached(b.inputs[0], b.inputs[1], b.inputs[2], a.batch, a.seq,
                                       a.position, a.heads, a.kv_heads, a.head_dim, b.outputs[0],
                                       b.outputs[1]);
       }
       return 0.0;
     },
     [](A a, B b) {  // saved: q, k, v, out, lse
       if (bf16_values(b)) {
         cpu::attention_backward_act(b.grad_output, act_in(b, 0), act_in(b, 1), act_in(b, 2),
                                     act_in(b, 3), b.inputs[4], a.batch, a.seq, a.heads, a.kv_heads,
                                     a.head_dim, b.grad_inputs[0], b.grad_inputs[1],
                                     b.grad_inputs[2], b.workspace, b.fresh_grad_inputs);
       } else {
         cpu::attention_backward(b.grad_output, b.inputs[0], b.inputs[1], b.inputs[2], b.inputs[3],
                                 b.inputs[4], a.batch, a.seq, a.heads, a.kv_heads, a.head_dim,
                                 b.grad_inputs[0], b.grad_inputs[1], b.grad_inputs[2], b.workspace,
                                 b.fresh_grad_inputs);
       }
     },
     0b111},
    {OpKind::kSiluMul,
     [](A a, B b) {
       if (bf16_values(b)) {
         cpu::silu_mul_forward_act(act_in(b, 0), act_in(b, 1), a.rows * a.dim, act_out(b, 0));
       } else {
         cpu::silu_mul_forward(b.inputs[0], b.inputs[1], a.rows * a.dim, b.outputs[0]);
       }
       return 0.0;
     },
     [](A a, B b) {  // saved: a, b
       if (bf16_values(b)) {
         cpu::silu_mul_backward_act(b.grad_output, act_in(b, 0), act_in(b, 1), a.rows * a.dim,
                                    b.grad_inputs[0], b.grad_inputs[1], b.fresh_grad_inputs);
       } else {
         cpu::silu_mul_backward(b.grad_output, b.inputs[0], b.inputs[1], a.rows * a.dim,
                                b.grad_inputs[0], b.grad_inputs[1], b.fresh_grad_inputs);
       }
     },
     0b11},
    {OpKind::kAdd,
     [](A a, B b) {
       if (bf16_values(b)) {
         cpu::add_forward_act(act_in(b, 0), act_in(b, 1), a.rows * a.dim, act_out(b, 0));
       } else {
         cpu::add_forward(b.inputs[0], b.inputs[1], a.rows * a.dim, b.outputs[0]);
       }
       return 0.0;
     },
     [](A a, B b) {
       cpu::add_backward(b.grad_output, a.rows * a.dim, b.grad_inputs[0], b.grad_inputs[1],
                         b.fresh_grad_inputs);
     },
     0b11},
    {OpKind::kCrossEntropy,
     [](A a, B b) {
       const double loss =
           cpu::cross_entropy_forward(b.inputs[0], b.targets, a.rows, a.dim, b.outputs[1]);
       b.outputs[0][0] = static_cast<float>(loss);
       return loss;
     },
     [](A a, B b) {  // saved: logits (also grad_inputs[0]: in place), lse
       cpu::cross_entropy_backward_inplace(b.grad_inputs[0], b.targets, b.inputs[1], a.rows, a.dim,
                                           1.0f / static_cast<float>(a.rows));
     }},
    {OpKind::kMoeRoute,
     [](A a, B b) {
       // Only the forward pass counts tokens per expert; a recompute (which
       // the plan never schedules for routing, see
       // OpInfo::outputs_always_kept) must not count twice.
       float* counts =
           b.is_recompute || b.mutable_params.size() < 2 ? nullptr : b.mutable_params[1];
       cpu::moe_route_forward(b.inputs[0], b.params[0], a.rows, a.experts, a.top_k, a.sigmoid,
                              b.outputs[0], b.outputs[1], counts);
       return 0.0;
     },
     [](A a, B b) {  // saved: logits, indices. expert_bias and counts get no gradient.
       cpu::moe_route_backward(b.grad_output, b.inputs[0], b.inputs[1], a.rows, a.experts, a.top_k,
                               a.sigmoid, b.grad_inputs[0], b.fresh_grad_inputs);
     },
     0b1},
    {OpKind::kMoeDispatch,
     [](A a, B b) {
       cpu::moe_dispatch_forward(b.inputs[0], b.inputs[1], b.inputs[2], a.rows, a.dim, a.top_k,
                                 a.experts, b.outputs[0], b.outputs[1], b.outputs[2]);
       return 0.0;
     },
     [](A a, B b) {  // saved: x, scores, perm. The indices get no gradient.
       cpu::moe_dispatch_backward(b.grad_output, b.inputs[0], b.inputs[1], b.inputs[2], a.rows,
                                  a.dim, a.top_k, b.grad_inputs[0], b.grad_inputs[1],
                                  b.fresh_grad_inputs & 0b11);
     },
     0b11},
    {OpKind::kGroupedLinear,
     [](A a, B b) {
       if (bf16_call(b)) {
         cpu::grouped_linear_bf16_forward(bf16_in(b.inputs[0]), b.inputs[1], bf16_in(b.params[0]),
                                          a.experts, a.k, a.n,
                                          reinterpret_cast<cpu::bf16*>(b.outputs[0]));
       } else if (bf16_values(b)) {
         cpu::grouped_linear_act_forward(bf16_in(b.inputs[0]), b.inputs[1], b.params[0], a.experts,
                                         a.k, a.n, reinterpret_cast<cpu::bf16*>(b.outputs[0]));
       } else {
         cpu::grouped_linear_forward(b.inputs[0], b.inputs[1], b.params[0], a.experts, a.m, a.k,
                                     a.n, b.outputs[0]);
       }
       return 0.0;
     },
     [](A a, B b) {  // saved: rows, offsets. The offsets get no gradient.
       if (bf16_call(b)) {
         cpu::grouped_linear_bf16_backward(bf16_in(b.grad_output), bf16_in(b.inputs[0]),
                                           b.inputs[1], bf16_in(b.params[0]), a.experts, a.k, a.n,
                                           b.grad_inputs[0], b.grad_params[0], fresh_param(b, 0),
                                           fresh_input(b, 0));
       } else if (bf16_values(b)) {
         cpu::grouped_linear_act_backward(b.grad_output, bf16_in(b.inputs[0]), b.inputs[1],
                                          b.params[0], a.experts, a.k, a.n, b.grad_inputs[0],
                                          b.grad_params[0], fresh_bits(b, 1));
       } else {
         cpu::grouped_linear_backward(b.grad_output, b.inputs[0], b.inputs[1], b.params[0],
                                      a.experts, a.m, a.k, a.n, b.grad_inputs[0], b.grad_params[0],
                                      fresh_bits(b, 1));
       }
     },
     0b1},
    {OpKind::kMoeCombine,
     [](A a, B b) {
       cpu::moe_combine_forward(b.inputs[0], b.inputs[1], a.rows, a.dim, a.top_k, b.outputs[0]);
       return 0.0;
     },
     [](A a, B b) {  // saved: perm
       cpu::moe_combine_backward(b.grad_output, b.inputs[0], a.rows, a.dim, a.top_k,
                                 b.grad_inputs[0], b.fresh_grad_inputs & 0b1);
     },
     0b1},
    {OpKind::kLinearCrossEntropy,
     [](A a, B b) {  // the forward workspace holds one chunk of logits
       const double loss =
           cpu::linear_cross_entropy_forward(loss_head(a, b, nullptr, nullptr), b.targets, a.m, a.n,
                                             a.chunk, b.workspace, b.outputs[1]);
       b.outputs[0][0] = static_cast<float>(loss);
       return loss;
     },
     [](A a, B b) {  // saved: x, lse. Like cross-entropy, dloss = 1 (not read).
       cpu::linear_cross_entropy_backward(loss_head(a, b, b.grad_inputs[0], b.grad_params[0]),
                                          b.targets, b.inputs[1], a.m, a.n, a.chunk, b.workspace,
                                          fresh_bits(b, 1));
     },
     0b1},
};

constexpr bool table_in_enum_order() {
  if (std::size(kCpuKernels) != static_cast<size_t>(kNumOpKinds)) return false;
  for (int i = 0; i < kNumOpKinds; ++i) {
    if (static_cast<int>(kCpuKernels[i].kind) != i) return false;
  }
  return true;
}
static_assert(table_in_enum_order(), "kCpuKernels: one row per OpKind, in enum order");

const CpuKernels& kernels_of(OpKind kind) {
  const int index = static_cast<int>(kind);
  if (index < 0 || index >= kNumOpKinds) throw std::logic_error("cpu: unknown op kind");
  return kCpuKernels[index];
}

}  // namespace

double cpu_forward(const Node& node, const OpBuffers& b) {
  return kernels_of(node.kind).forward(node.attrs, b);
}

void cpu_backward(const Node& node, const OpBuffers& b) {
  kernels_of(node.kind).backward(node.attrs, b);
}

uint32_t cpu_fresh_grad_inputs(OpKind kind) { return kernels_of(kind).fresh_grads; }

bool cpu_has_kernels(OpKind kind) {
  const CpuKernels& k = kernels_of(kind);
  return k.forward != nullptr && k.backward != nullptr;
}

}  // namespace remat
