#include "graph/op.h"

#include <initializer_list>
#include <iterator>
#include <stdexcept>

#include "graph/program.h"
#include "kernels/cpu/kernels.h"

namespace remat {

namespace {

// The product of the factors; models/limits.h keeps it far below 2^63, so
// an overflow here is a bug, reported instead of wrapping.
int64_t product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p)) throw std::overflow_error("FLOP count overflows int64");
  return p;
}

int64_t no_flops(const OpAttrs&) { return 0; }
int64_t no_workspace(const OpAttrs&) { return 0; }
int64_t matmul_flops(const OpAttrs& a) { return product({2, a.m, a.k, a.n}); }
std::vector<Shape> rows_by_dim(const OpAttrs& a) { return {{a.rows, a.dim}}; }
std::vector<Shape> m_by_n(const OpAttrs& a) { return {{a.m, a.n}}; }
// linear_cross_entropy's forward: one chunk of logits, f32.
int64_t loss_chunk_bytes(const OpAttrs& a) {
  return bytes_of(cpu::linear_cross_entropy_scratch_floats(a.m, a.n, a.chunk), DType::kF32);
}
// Its backward: the same, and under bf16 compute a bf16 copy of the chunk's
// logit gradient for the bf16 GEMMs (whole floats: the executor books f32).
int64_t loss_chunk_backward_bytes(const OpAttrs& a) {
  const int64_t floats = cpu::linear_cross_entropy_scratch_floats(a.m, a.n, a.chunk);
  const int64_t copy = a.compute == DType::kBF16 ? (floats + 1) / 2 : 0;
  return bytes_of(floats + copy, DType::kF32);
}

// Indexed by OpKind: each row names its kind, checked at compile time.
// One packed row per op kind: the formatter would spread each over 13 lines.
// clang-format off
constexpr OpInfo kOpTable[] = {
    {.kind = OpKind::kEmbedding, .name = "embedding", .op_class = OpClass::kOther,
     .num_inputs = 0, .num_outputs = 1, .saved_inputs = 0b0, .saved_outputs = 0b0,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out"}, .output_shapes = rows_by_dim, .flops = no_flops,
     .workspace_bytes = no_workspace},
    {.kind = OpKind::kRmsNorm, .name = "rmsnorm", .op_class = OpClass::kOther,
     .num_inputs = 1, .num_outputs = 2, .saved_inputs = 0b1, .saved_outputs = 0b10,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out", ":rstd"},
     .output_shapes = [](const OpAttrs& a) -> std::vector<Shape> {
       return {{a.rows, a.dim}, {a.rows}};
     },
     .flops = no_flops, .workspace_bytes = no_workspace, .fp32_outputs = 0b10},
    {.kind = OpKind::kLinear, .name = "linear", .op_class = OpClass::kMatmul,
     .num_inputs = 1, .num_outputs = 1, .saved_inputs = 0b1, .saved_outputs = 0b0,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out"}, .output_shapes = m_by_n, .flops = matmul_flops,
     .workspace_bytes = no_workspace, .grads_over_saved_inputs = 0b1},
    {.kind = OpKind::kRope, .name = "rope", .op_class = OpClass::kOther,
     .num_inputs = 1, .num_outputs = 1, .saved_inputs = 0b0, .saved_outputs = 0b0,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out"},
     .output_shapes = [](const OpAttrs& a) -> std::vector<Shape> {
       return {{a.batch, a.seq, a.heads, a.head_dim}};
     },
     .flops = no_flops, .workspace_bytes = no_workspace},
    {.kind = OpKind::kAttention, .name = "attention", .op_class = OpClass::kAttentionCore,
     .num_inputs = 3, .num_outputs = 2, .saved_inputs = 0b111, .saved_outputs = 0b11,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out", ":lse"},
     .output_shapes = [](const OpAttrs& a) -> std::vector<Shape> {
       return {{a.batch, a.seq, a.heads, a.head_dim}, {a.batch, a.heads, a.seq}};
     },
     // QK^T and PV, each 2 * s * s * d per head and batch row.
     .flops =
         [](const OpAttrs& a) {
           return product({4, a.batch, a.heads, a.seq, a.seq, a.head_dim});
         },
     // The kernel sizes its own scratch (f32).
     .workspace_bytes =
         [](const OpAttrs& a) {
           return bytes_of(cpu::attention_backward_workspace_floats(a.batch, a.seq, a.heads),
                           DType::kF32);
         },
     .fp32_outputs = 0b10},
    {.kind = OpKind::kSiluMul, .name = "silu_mul", .op_class = OpClass::kOther,
     .num_inputs = 2, .num_outputs = 1, .saved_inputs = 0b11, .saved_outputs = 0b0,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out"}, .output_shapes = rows_by_dim, .flops = no_flops,
     .workspace_bytes = no_workspace, .grads_over_saved_inputs = 0b11},
    {.kind = OpKind::kAdd, .name = "add", .op_class = OpClass::kOther,
     .num_inputs = 2, .num_outputs = 1, .saved_inputs = 0b0, .saved_outputs = 0b0,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out"}, .output_shapes = rows_by_dim, .flops = no_flops,
     .workspace_bytes = no_workspace, .grad_output_becomes_input_grad = true},
    {.kind = OpKind::kCrossEntropy, .name = "cross_entropy", .op_class = OpClass::kOther,
     .num_inputs = 1, .num_outputs = 2, .saved_inputs = 0b1, .saved_outputs = 0b10,
     .grad_in_place_of_input0 = true, .outputs_always_kept = false,
     .output_suffixes = {":out", ":lse"},
     .output_shapes = [](const OpAttrs& a) -> std::vector<Shape> { return {{1}, {a.rows}}; },
     .flops = no_flops, .workspace_bytes = no_workspace, .fp32_outputs = 0b11,
     .fp32_inputs = 0b1},
    {.kind = OpKind::kMoeRoute, .name = "moe_route", .op_class = OpClass::kOther,
     .num_inputs = 1, .num_outputs = 2, .saved_inputs = 0b1, .saved_outputs = 0b10,
     .grad_in_place_of_input0 = false, .outputs_always_kept = true,
     .output_suffixes = {":out", ":indices"},
     .output_shapes = [](const OpAttrs& a) -> std::vector<Shape> {
       return {{a.rows, a.top_k}, {a.rows, a.top_k}};
     },
     .flops = no_flops, .workspace_bytes = no_workspace, .fp32_outputs = 0b11},
    {.kind = OpKind::kMoeDispatch, .name = "moe_dispatch", .op_class = OpClass::kOther,
     .num_inputs = 3, .num_outputs = 3, .saved_inputs = 0b011, .saved_outputs = 0b100,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out", ":offsets", ":perm"},
     .output_shapes = [](const OpAttrs& a) -> std::vector<Shape> {
       return {{a.rows * a.top_k, a.dim}, {a.experts + 1}, {a.rows * a.top_k}};
     },
     .flops = no_flops, .workspace_bytes = no_workspace, .fp32_outputs = 0b110},
    {.kind = OpKind::kGroupedLinear, .name = "grouped_linear", .op_class = OpClass::kMatmul,
     .num_inputs = 2, .num_outputs = 1, .saved_inputs = 0b11, .saved_outputs = 0b0,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out"}, .output_shapes = m_by_n, .flops = matmul_flops,
     .workspace_bytes = no_workspace, .grads_over_saved_inputs = 0b1},
    {.kind = OpKind::kMoeCombine, .name = "moe_combine", .op_class = OpClass::kOther,
     .num_inputs = 2, .num_outputs = 1, .saved_inputs = 0b10, .saved_outputs = 0b0,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out"}, .output_shapes = rows_by_dim, .flops = no_flops,
     .workspace_bytes = no_workspace},
    {.kind = OpKind::kLinearCrossEntropy, .name = "linear_cross_entropy",
     .op_class = OpClass::kMatmul,
     .num_inputs = 1, .num_outputs = 2, .saved_inputs = 0b1, .saved_outputs = 0b10,
     .grad_in_place_of_input0 = false, .outputs_always_kept = false,
     .output_suffixes = {":out", ":lse"},
     .output_shapes = [](const OpAttrs& a) -> std::vector<Shape> { return {{1}, {a.m}}; },
     .flops = matmul_flops, .workspace_bytes = loss_chunk_backward_bytes, .fp32_outputs = 0b11,
     .fp32_inputs = 0b0, .forward_workspace_bytes = loss_chunk_bytes,
     .backward_recomputes_forward = true},
};
// clang-format on

constexpr bool table_in_enum_order() {
  if (std::size(kOpTable) != static_cast<size_t>(kNumOpKinds)) return false;
  for (int i = 0; i < kNumOpKinds; ++i) {
    const OpInfo& row = kOpTable[i];
    if (static_cast<int>(row.kind) != i || row.num_outputs < 1 || row.num_outputs > kMaxOpOutputs ||
        row.output_shapes == nullptr || row.flops == nullptr || row.workspace_bytes == nullptr)
      return false;
    for (int o = 0; o < row.num_outputs; ++o)
      if (row.output_suffixes[o] == nullptr) return false;
  }
  return true;
}
static_assert(table_in_enum_order(), "kOpTable: one complete row per OpKind, in enum order");

}  // namespace

const OpInfo& op_info(OpKind kind) {
  const int index = static_cast<int>(kind);
  if (index < 0 || index >= kNumOpKinds) throw std::logic_error("unknown op kind");
  return kOpTable[index];
}

std::vector<Shape> infer_output_shapes(const Node& node) {
  return op_info(node.kind).output_shapes(node.attrs);
}

int64_t forward_flops(const Node& node) { return op_info(node.kind).flops(node.attrs); }

int64_t backward_flops(const Node& node) { return 2 * forward_flops(node); }

int64_t backward_workspace_bytes(const Node& node) {
  return op_info(node.kind).workspace_bytes(node.attrs);
}

int64_t forward_workspace_bytes(const Node& node) {
  const OpInfo& info = op_info(node.kind);
  return info.forward_workspace_bytes == nullptr ? 0 : info.forward_workspace_bytes(node.attrs);
}

int64_t backward_recompute_flops(const Node& node) {
  return op_info(node.kind).backward_recomputes_forward ? forward_flops(node) : 0;
}

}  // namespace remat
