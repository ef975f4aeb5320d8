#include "graph/op.h"

#include <initializer_list>
#include <stdexcept>

#include "graph/program.h"
#include "kernels/cpu/kernels.h"

namespace remat {

const OpInfo& op_info(OpKind kind) {
  //                                 name  class  in out  saved_in saved_out in-place
  static const OpInfo kEmbedding{"embedding", OpClass::kOther, 0, 1, 0b0, 0b0, false};
  static const OpInfo kRmsNorm{"rmsnorm", OpClass::kOther, 1, 2, 0b1, 0b10, false};
  static const OpInfo kLinear{"linear", OpClass::kMatmul, 1, 1, 0b1, 0b0, false};
  static const OpInfo kRope{"rope", OpClass::kOther, 1, 1, 0b0, 0b0, false};
  static const OpInfo kAttention{"attention", OpClass::kAttentionCore, 3, 2, 0b111, 0b11, false};
  static const OpInfo kSiluMul{"silu_mul", OpClass::kOther, 2, 1, 0b11, 0b0, false};
  static const OpInfo kAdd{"add", OpClass::kOther, 2, 1, 0b0, 0b0, false};
  static const OpInfo kCrossEntropy{"cross_entropy", OpClass::kOther, 1, 2, 0b1, 0b10, true};
  static const OpInfo kMoeRoute{"moe_route", OpClass::kOther, 1, 2, 0b1, 0b10, false, true};
  static const OpInfo kMoeDispatch{"moe_dispatch", OpClass::kOther, 3, 3, 0b011, 0b100, false};
  static const OpInfo kGroupedLinear{"grouped_linear", OpClass::kMatmul, 2, 1, 0b11, 0b0, false};
  static const OpInfo kMoeCombine{"moe_combine", OpClass::kOther, 2, 1, 0b10, 0b0, false};
  switch (kind) {
    case OpKind::kMoeRoute: return kMoeRoute;
    case OpKind::kMoeDispatch: return kMoeDispatch;
    case OpKind::kGroupedLinear: return kGroupedLinear;
    case OpKind::kMoeCombine: return kMoeCombine;
    case OpKind::kEmbedding: return kEmbedding;
    case OpKind::kRmsNorm: return kRmsNorm;
    case OpKind::kLinear: return kLinear;
    case OpKind::kRope: return kRope;
    case OpKind::kAttention: return kAttention;
    case OpKind::kSiluMul: return kSiluMul;
    case OpKind::kAdd: return kAdd;
    case OpKind::kCrossEntropy: return kCrossEntropy;
  }
  throw std::logic_error("unknown op kind");
}

std::vector<Shape> infer_output_shapes(const Node& node) {
  const OpAttrs& a = node.attrs;
  switch (node.kind) {
    case OpKind::kEmbedding: return {{a.rows, a.dim}};
    case OpKind::kRmsNorm: return {{a.rows, a.dim}, {a.rows}};
    case OpKind::kLinear: return {{a.m, a.n}};
    case OpKind::kRope: return {{a.batch, a.seq, a.heads, a.head_dim}};
    case OpKind::kAttention:
      return {{a.batch, a.seq, a.heads, a.head_dim}, {a.batch, a.heads, a.seq}};
    case OpKind::kSiluMul:
    case OpKind::kAdd: return {{a.rows, a.dim}};
    case OpKind::kCrossEntropy: return {{1}, {a.rows}};
    case OpKind::kMoeRoute: return {{a.rows, a.top_k}, {a.rows, a.top_k}};
    case OpKind::kMoeDispatch:
      return {{a.rows * a.top_k, a.dim}, {a.experts + 1}, {a.rows * a.top_k}};
    case OpKind::kGroupedLinear: return {{a.m, a.n}};
    case OpKind::kMoeCombine: return {{a.rows, a.dim}};
  }
  throw std::logic_error("unknown op kind");
}

namespace {
// The product of the factors; models/limits.h keeps it far below 2^63, so
// an overflow here is a bug, reported instead of wrapping.
int64_t product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p)) throw std::overflow_error("FLOP count overflows int64");
  return p;
}

int64_t attention_core_flops(const OpAttrs& a) {
  // QK^T and PV, each 2 * s * s * d per head and batch row.
  return product({4, a.batch, a.heads, a.seq, a.seq, a.head_dim});
}
}  // namespace

int64_t forward_flops(const Node& node) {
  switch (node.kind) {
    case OpKind::kLinear:
    case OpKind::kGroupedLinear: return product({2, node.attrs.m, node.attrs.k, node.attrs.n});
    case OpKind::kAttention: return attention_core_flops(node.attrs);
    default: return 0;
  }
}

int64_t backward_flops(const Node& node) { return 2 * forward_flops(node); }

int64_t backward_workspace_floats(const Node& node) {
  if (node.kind == OpKind::kAttention) {  // the kernel sizes its own scratch
    return cpu::attention_backward_workspace_floats(node.attrs.batch, node.attrs.seq,
                                                    node.attrs.heads);
  }
  return 0;
}

}  // namespace remat
