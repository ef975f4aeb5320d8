#include "runtime/executor.h"

#include <chrono>
#include <stdexcept>

namespace remat {

Executor::Executor(const Program& program, Schedule schedule, Allocator& allocator,
                   ModelState& state)
    : program_(program),
      schedule_(std::move(schedule)),
      allocator_(&allocator),
      state_(state),
      backend_(*state.backend),
      values_(program.values.size()),
      grads_(program.values.size()) {}

Tensor& Executor::grad_of(ValueId v) {
  Tensor& g = grads_[v];
  if (!g.defined()) {
    const Value& value = program_.values[v];
    g = Tensor(*allocator_, value.shape, MemoryCategory::kTemporaries, value.dtype);
    backend_.zero(g);  // backward kernels accumulate
  }
  return g;
}

void Executor::release_values() {
  for (Tensor& v : values_) v.reset();
}

double Executor::run(const Batch& batch) {
  counts_ = ExecutionCounts{};
  loss_ = 0;
  release_values();  // the previous step's loss
  using Clock = std::chrono::steady_clock;
  const Clock::time_point run_start = Clock::now();
  for (const Step& step : schedule_.steps) {
    const Node& node = program_.nodes[step.node];
    label_ = std::string(to_string(step.kind)) + " " + node.fqn;
    allocator_->set_label(label_);
    if (observer_) observer_(step);
    const Clock::time_point start = Clock::now();
    switch (step.kind) {
      case Step::Kind::kForward:
        forward(node, step.node, false, batch);
        break;
      case Step::Kind::kRecompute:
        forward(node, step.node, true, batch);
        break;
      case Step::Kind::kBackward:
        backward(node, batch);
        break;
    }
    for (ValueId v : step.free_after) values_[v].reset();
    if (profiling_) record_time(step, run_start, start);
  }
  allocator_->set_label({});
  return loss_;
}

void Executor::record_time(const Step& step, std::chrono::steady_clock::time_point run_start,
                           std::chrono::steady_clock::time_point start) {
  using Seconds = std::chrono::duration<double>;
  const double seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  if (step.kind != Step::Kind::kRecompute) {
    auto& by_node = step.kind == Step::Kind::kForward ? counts_.forward_seconds_by_node
                                                      : counts_.backward_seconds_by_node;
    by_node.resize(program_.nodes.size());
    by_node[step.node] = seconds;
  }
  const Node& node = program_.nodes[step.node];
  counts_.seconds_by_op[std::string(to_string(step.kind)) + " " + op_info(node.kind).name] +=
      seconds;
  counts_.step_times.push_back({Seconds(start - run_start).count(), seconds});
}

void Executor::forward(const Node& node, int32_t index, bool recompute, const Batch& batch) {
  OpBuffers b;
  for (ValueId in : node.inputs) {
    if (!values_[in].defined()) {
      throw std::logic_error("executor: " + program_.values[in].name + " is not live at " + label_);
    }
    b.inputs.push_back(values_[in].data());
  }
  for (ParamId p : node.params) {
    b.params.push_back(state_.params[p].data());
    b.mutable_params.push_back(state_.params[p].data());
  }
  b.is_recompute = recompute;
  // A recompute may rebuild an output that is still live (a node with one
  // kept and one dropped output): that copy goes to scratch and is dropped.
  std::vector<Tensor> scratch;
  for (ValueId out : node.outputs) {
    const bool kept = !recompute && schedule_.keep[out];
    const MemoryCategory category =
        kept ? MemoryCategory::kActivations : MemoryCategory::kTemporaries;
    const Value& value = program_.values[out];
    Tensor t(*allocator_, value.shape, category, value.dtype);
    b.outputs.push_back(t.data());
    if (values_[out].defined()) {
      scratch.push_back(std::move(t));
    } else {
      values_[out] = std::move(t);
    }
  }
  b.tokens = batch.inputs;
  b.targets = batch.targets;
  const int64_t flops = forward_flops(node);
  const bool matmul = op_info(node.kind).op_class == OpClass::kMatmul;
  if (recompute) {
    ++counts_.recompute_ops;
    counts_.recompute_matmuls += matmul;
    counts_.recompute_flops += flops;
    counts_.recomputed_nodes.push_back(index);
  } else {
    ++counts_.forward_ops;
    counts_.forward_matmuls += matmul;
    counts_.forward_flops += flops;
  }
  if (dry_run()) return;
  const double loss = backend_.forward(node, b);
  if (node.kind == OpKind::kCrossEntropy && !recompute) loss_ = loss;
}

void Executor::backward(const Node& node, const Batch& batch) {
  OpBuffers b;
  for (ValueId v : saved_values(node)) {
    if (!values_[v].defined()) {
      throw std::logic_error("executor: saved value " + program_.values[v].name +
                             " is not live at " + label_);
    }
    b.inputs.push_back(values_[v].data());
  }
  for (ParamId p : node.params) {
    b.params.push_back(state_.params[p].data());
    b.grad_params.push_back(state_.grads[p].data());
  }
  const OpInfo& info = op_info(node.kind);
  if (info.grad_in_place_of_input0) {
    // The input's buffer becomes its gradient: no second copy exists.
    const ValueId in = node.inputs[0];
    grads_[in] = std::move(values_[in]);
    grads_[in].recategorize(MemoryCategory::kTemporaries);
    b.grad_inputs.push_back(grads_[in].data());
  } else {
    for (ValueId in : node.inputs) b.grad_inputs.push_back(grad_of(in).data());
    b.grad_output = grads_[node.outputs[0]].data();
    if (!grads_[node.outputs[0]].defined()) {
      throw std::logic_error("executor: no gradient reaches " + node.fqn);
    }
  }
  Tensor workspace;
  if (const int64_t bytes = backend_.workspace_bytes(node); bytes > 0) {
    workspace =
        Tensor(*allocator_, {bytes / dtype_size(DType::kF32)}, MemoryCategory::kTemporaries);
    b.workspace = workspace.data();
  }
  b.tokens = batch.inputs;
  b.targets = batch.targets;
  ++counts_.backward_ops;
  counts_.backward_matmuls += info.op_class == OpClass::kMatmul;
  counts_.backward_flops += backward_flops(node);
  if (!dry_run()) backend_.backward(node, b);
  // The gradient of this node's outputs has been consumed.
  for (ValueId out : node.outputs) grads_[out].reset();
}

}  // namespace remat
