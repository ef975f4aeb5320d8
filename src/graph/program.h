// A program: the straight-line SSA list of ops that one training step runs,
// from token ids to the loss. Every other part of remat reads it: the AC
// policy turns it into a plan, the executor runs it, the planner walks it.
//
// Invariants:
//  - nodes are in execution order; a node's inputs are produced by earlier
//    nodes (or are the token batch, which is not a value);
//  - every value has exactly one producer;
//  - node.block is the transformer block the node belongs to (-1 outside any
//    block); the nodes of a block are contiguous.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/op.h"

namespace remat {

using ValueId = int32_t;
using ParamId = int32_t;
constexpr ParamId kNoParam = -1;

struct Value {
  std::string name;  // e.g. "layers.3.attention.wq:out"
  Shape shape;
  int32_t producer = -1;
  DType dtype = DType::kF32;
  int64_t bytes() const { return bytes_of(numel(shape), dtype); }
};

// How a parameter starts (torchtitan's initialisation, spec.md §3).
struct ParamInit {
  enum class Kind { kNormal, kTruncatedNormal, kOnes, kZeros } kind = Kind::kZeros;
  double std = 0;
  double lower = 0;  // truncation bounds (absolute values)
  double upper = 0;
};

struct Param {
  std::string fqn;  // torchtitan FQN with ".weight", e.g. "layers.0.attention.wq.weight"
  Shape shape;
  ParamInit init;
  bool trainable = true;  // false for buffers updated outside the optimizer
  DType dtype = DType::kF32;
};

struct Node {
  OpKind kind;
  std::string fqn;  // module FQN, e.g. "layers.3.attention.wq"
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::vector<ParamId> params;
  int32_t block = -1;
  OpAttrs attrs;
};

struct Program {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<Param> params;
  int32_t n_blocks = 0;
  int64_t batch = 0;
  int64_t seq = 0;
  ValueId loss = -1;  // a [1] value holding the mean loss
  // The dtype of activations and matmul operands (set_compute_dtype).
  DType compute_dtype = DType::kF32;

  int64_t num_parameters() const;
  // Nodes that consume value v, in execution order.
  std::vector<int32_t> consumers(ValueId v) const;
};

// Mixed precision (training.mixed_precision_param = "bfloat16"): every
// value takes `dtype` except those the op table keeps in fp32
// (OpInfo::fp32_outputs, fp32_inputs), so every byte count, the planner's
// included, follows from the values' dtypes. Parameters stay fp32 (master
// weights); runtime/executor.h says how kernels see the values.
void set_compute_dtype(Program& program, DType dtype);

// Whether value v gets a gradient: only an op's first output does (op.h);
// the others are indices and offsets (a route's, a dispatch's) or saved
// statistics, and their readers' backward writes nothing for them.
bool carries_gradient(const Program& program, ValueId v);

// Which input's gradient a node's backward makes of its output's gradient
// buffer (OpInfo::grad_output_becomes_input_grad): the first input read
// once by the node whose gradient nothing has written yet this pass
// (grad_written), or -1 for none. The executor asks as it runs; the budget
// solver's simulation asks ahead of time, with the same answers.
int grad_output_taker(const Program& program, const Node& node,
                      const std::function<bool(ValueId)>& grad_written);

// Per value: the first and the last node that reads it (-1: none), in one
// pass over the program.
struct ValueReaders {
  std::vector<int32_t> first, last;
};
ValueReaders value_readers(const Program& program);

// Whether input i of node `n` may become its own gradient in place
// (OpInfo::grads_over_saved_inputs) whenever the plan lets it die at n's
// backward: an fp32 value read once by n, whose gradient n writes first (n
// is its last reader), produced and read only inside n's block. Which plans
// let it die there is the schedule's to say (Step::grads_over_inputs).
bool grad_may_overwrite_input(const Program& program, const ValueReaders& readers, int32_t n,
                              size_t i);

}  // namespace remat
