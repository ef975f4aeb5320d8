#include "runtime/cpu_ops.h"

#include <stdexcept>

#include "kernels/cpu/kernels.h"

namespace remat {

double cpu_forward(const Node& node, const OpBuffers& b) {
  const OpAttrs& a = node.attrs;
  switch (node.kind) {
    case OpKind::kEmbedding:
      cpu::embedding_forward(b.tokens, a.rows, b.params[0], a.dim, b.outputs[0]);
      return 0;
    case OpKind::kRmsNorm:
      cpu::rmsnorm_forward(b.inputs[0], b.params[0], a.rows, a.dim, a.eps, b.outputs[0],
                           b.outputs[1]);
      return 0;
    case OpKind::kLinear:
      if (a.weight_in_out) {
        cpu::linear_in_out_forward(b.inputs[0], b.params[0], a.m, a.k, a.n, b.outputs[0]);
      } else {
        cpu::linear_forward(b.inputs[0], b.params[0], a.m, a.k, a.n, b.outputs[0]);
      }
      return 0;
    case OpKind::kRope:
      cpu::rope_forward(b.inputs[0], a.batch, a.seq, a.heads, a.head_dim, a.theta,
                        b.outputs[0]);
      return 0;
    case OpKind::kAttention:
      cpu::attention_forward(b.inputs[0], b.inputs[1], b.inputs[2], a.batch, a.seq, a.heads,
                             a.kv_heads, a.head_dim, b.outputs[0], b.outputs[1]);
      return 0;
    case OpKind::kSiluMul:
      cpu::silu_mul_forward(b.inputs[0], b.inputs[1], a.rows * a.dim, b.outputs[0]);
      return 0;
    case OpKind::kAdd:
      cpu::add_forward(b.inputs[0], b.inputs[1], a.rows * a.dim, b.outputs[0]);
      return 0;
    case OpKind::kCrossEntropy: {
      const double loss =
          cpu::cross_entropy_forward(b.inputs[0], b.targets, a.rows, a.dim, b.outputs[1]);
      b.outputs[0][0] = static_cast<float>(loss);
      return loss;
    }
    case OpKind::kMoeRoute: {
      // Only the forward pass counts tokens per expert; a recompute (which the
      // plan never schedules for routing, see OpInfo::outputs_always_kept)
      // must not count twice.
      float* counts = b.is_recompute || b.mutable_params.size() < 2 ? nullptr
                                                                    : b.mutable_params[1];
      cpu::moe_route_forward(b.inputs[0], b.params[0], a.rows, a.experts, a.top_k, a.sigmoid,
                             b.outputs[0], b.outputs[1], counts);
      return 0;
    }
    case OpKind::kMoeDispatch:
      cpu::moe_dispatch_forward(b.inputs[0], b.inputs[1], b.inputs[2], a.rows, a.dim, a.top_k,
                                a.experts, b.outputs[0], b.outputs[1], b.outputs[2]);
      return 0;
    case OpKind::kGroupedLinear:
      cpu::grouped_linear_forward(b.inputs[0], b.inputs[1], b.params[0], a.experts, a.m, a.k,
                                  a.n, b.outputs[0]);
      return 0;
    case OpKind::kMoeCombine:
      cpu::moe_combine_forward(b.inputs[0], b.inputs[1], a.rows, a.dim, a.top_k, b.outputs[0]);
      return 0;
  }
  throw std::logic_error("cpu_forward: unknown op");
}

void cpu_backward(const Node& node, const OpBuffers& b) {
  const OpAttrs& a = node.attrs;
  switch (node.kind) {
    case OpKind::kEmbedding:
      cpu::embedding_backward(b.tokens, a.rows, b.grad_output, a.dim,
                              a.n, b.grad_params[0]);
      return;
    case OpKind::kRmsNorm:
      // outputs[1] is the saved rstd (passed through inputs for backward).
      cpu::rmsnorm_backward(b.grad_output, b.inputs[0], b.params[0], b.inputs[1], a.rows,
                            a.dim, b.grad_inputs[0], b.grad_params[0]);
      return;
    case OpKind::kLinear:
      if (a.weight_in_out) {
        cpu::linear_in_out_backward(b.grad_output, b.inputs[0], b.params[0], a.m, a.k, a.n,
                                    b.grad_inputs[0], b.grad_params[0]);
      } else {
        cpu::linear_backward(b.grad_output, b.inputs[0], b.params[0], a.m, a.k, a.n,
                             b.grad_inputs[0], b.grad_params[0]);
      }
      return;
    case OpKind::kMoeRoute:
      // inputs: saved logits, saved indices. expert_bias and counts get no gradient.
      cpu::moe_route_backward(b.grad_output, b.inputs[0], b.inputs[1], a.rows, a.experts,
                              a.top_k, a.sigmoid, b.grad_inputs[0]);
      return;
    case OpKind::kMoeDispatch:
      // inputs: saved x, scores, perm. The indices get no gradient.
      cpu::moe_dispatch_backward(b.grad_output, b.inputs[0], b.inputs[1], b.inputs[2], a.rows,
                                 a.dim, a.top_k, b.grad_inputs[0], b.grad_inputs[1]);
      return;
    case OpKind::kGroupedLinear:
      // inputs: saved rows, offsets. The offsets get no gradient.
      cpu::grouped_linear_backward(b.grad_output, b.inputs[0], b.inputs[1], b.params[0],
                                   a.experts, a.m, a.k, a.n, b.grad_inputs[0],
                                   b.grad_params[0]);
      return;
    case OpKind::kMoeCombine:
      // inputs: saved perm.
      cpu::moe_combine_backward(b.grad_output, b.inputs[0], a.rows, a.dim, a.top_k,
                                b.grad_inputs[0]);
      return;
    case OpKind::kRope:
      cpu::rope_backward(b.grad_output, a.batch, a.seq, a.heads, a.head_dim, a.theta,
                         b.grad_inputs[0]);
      return;
    case OpKind::kAttention:
      cpu::attention_backward(b.grad_output, b.inputs[0], b.inputs[1], b.inputs[2],
                              b.inputs[3], b.inputs[4], a.batch, a.seq, a.heads, a.kv_heads,
                              a.head_dim, b.grad_inputs[0], b.grad_inputs[1],
                              b.grad_inputs[2], b.workspace);
      return;
    case OpKind::kSiluMul:
      cpu::silu_mul_backward(b.grad_output, b.inputs[0], b.inputs[1], a.rows * a.dim,
                             b.grad_inputs[0], b.grad_inputs[1]);
      return;
    case OpKind::kAdd:
      cpu::add_backward(b.grad_output, a.rows * a.dim, b.grad_inputs[0], b.grad_inputs[1]);
      return;
    case OpKind::kCrossEntropy:
      // grad_inputs[0] is the logits buffer itself; inputs[1] the saved lse.
      cpu::cross_entropy_backward_inplace(b.grad_inputs[0], b.targets, b.inputs[1], a.rows,
                                          a.dim, 1.0f / static_cast<float>(a.rows));
      return;
  }
  throw std::logic_error("cpu_backward: unknown op");
}

}  // namespace remat
