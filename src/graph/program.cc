#include "graph/program.h"

#include <algorithm>
#include <stdexcept>

namespace remat {

int64_t Program::num_parameters() const {
  int64_t n = 0;
  for (const Param& p : params) {
    if (p.trainable && __builtin_add_overflow(n, numel(p.shape), &n))
      throw std::overflow_error("num_parameters overflows int64");
  }
  return n;
}

std::vector<int32_t> Program::consumers(ValueId v) const {
  std::vector<int32_t> result;
  for (int32_t i = 0; i < static_cast<int32_t>(nodes.size()); ++i) {
    for (ValueId in : nodes[i].inputs) {
      if (in == v) {
        result.push_back(i);
        break;
      }
    }
  }
  return result;
}

void set_compute_dtype(Program& program, DType dtype) {
  program.compute_dtype = dtype;
  for (Value& v : program.values) v.dtype = dtype;
  for (Node& node : program.nodes) {
    node.attrs.compute = dtype;
    const OpInfo& info = op_info(node.kind);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (info.fp32_outputs >> o & 1u) program.values[node.outputs[o]].dtype = DType::kF32;
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (info.fp32_inputs >> i & 1u) program.values[node.inputs[i]].dtype = DType::kF32;
    }
  }
}

int grad_output_taker(const Program& program, const Node& node,
                      const std::function<bool(ValueId)>& grad_written) {
  if (!op_info(node.kind).grad_output_becomes_input_grad || node.outputs[0] == program.loss) {
    return -1;
  }
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const ValueId in = node.inputs[i];
    // add(x, x): both gradients land in one buffer, which must start from zeros.
    const bool once = std::count(node.inputs.begin(), node.inputs.end(), in) == 1;
    if (once && !grad_written(in)) return static_cast<int>(i);
  }
  return -1;
}

ValueReaders value_readers(const Program& program) {
  ValueReaders r{std::vector<int32_t>(program.values.size(), -1),
                 std::vector<int32_t>(program.values.size(), -1)};
  for (int32_t n = 0; n < static_cast<int32_t>(program.nodes.size()); ++n) {
    for (ValueId v : program.nodes[n].inputs) {
      if (r.first[v] < 0) r.first[v] = n;
      r.last[v] = n;
    }
  }
  return r;
}

bool carries_gradient(const Program& program, ValueId v) {
  return program.nodes[program.values[v].producer].outputs[0] == v;
}

bool grad_may_overwrite_input(const Program& program, const ValueReaders& readers, int32_t n,
                              size_t i) {
  const Node& node = program.nodes[n];
  if (((op_info(node.kind).grads_over_saved_inputs >> i) & 1) == 0 || node.block < 0) return false;
  const ValueId v = node.inputs[i];
  const Value& value = program.values[v];
  // A block's nodes are contiguous: with its first and last readers in the
  // block, every reader is.
  return value.dtype == DType::kF32 && v != program.loss &&
         std::count(node.inputs.begin(), node.inputs.end(), v) == 1 &&
         program.nodes[value.producer].block == node.block && readers.last[v] == n &&
         program.nodes[readers.first[v]].block == node.block;
}

}  // namespace remat
