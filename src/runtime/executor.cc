#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace remat {

int32_t gather_unit(const Program& program, const Step& step) {
  const int32_t block = program.nodes[step.node].block;
  return step.kind == Step::Kind::kForward ? block : -block - 2;
}

StepBookings step_bookings(const Program& program, Backend& backend) {
  StepBookings b;
  const bool typed = program.compute_dtype == DType::kBF16;
  // An fp32 copy of a bf16 value, for a kernel that reads or writes fp32.
  auto widened = [&](ValueId v, bool bf16_kernel) -> int64_t {
    const Value& value = program.values[v];
    return value.dtype == DType::kBF16 && !bf16_kernel ? bytes_of(numel(value.shape), DType::kF32)
                                                       : 0;
  };
  // Executor::scratch books whole floats.
  auto scratch = [](int64_t bytes) { return bytes <= 0 ? 0 : bytes / 4 * 4; };
  for (const Node& node : program.nodes) {
    const Bf16Use use = typed ? backend.bf16_use(node.kind) : Bf16Use::kNone;
    const bool bf16 = use != Bf16Use::kNone;
    int64_t forward = scratch(backend.forward_workspace_bytes(node));
    for (ValueId v : node.inputs) forward += widened(v, bf16);
    for (ValueId v : node.outputs) forward += widened(v, bf16);
    int64_t backward = scratch(backend.workspace_bytes(node));
    for (ValueId v : saved_values(node)) backward += widened(v, bf16);
    const bool is_loss = node.outputs[0] == program.loss;
    if (use == Bf16Use::kAll && !is_loss && !op_info(node.kind).grad_in_place_of_input0) {
      backward += bytes_of(numel(program.values[node.outputs[0]].shape), DType::kBF16);
    }
    int64_t copies = 0;
    if (use == Bf16Use::kAll) {
      for (ParamId p : node.params)
        copies += bytes_of(numel(program.params[p].shape), DType::kBF16);
    }
    b.forward_scratch.push_back(forward);
    b.backward_scratch.push_back(backward);
    b.weight_copies.push_back(copies);
  }
  return b;
}

Executor::Executor(const Program& program, Schedule schedule, Allocator& allocator,
                   ModelState& state)
    : program_(program),
      schedule_(std::move(schedule)),
      allocator_(&allocator),
      state_(state),
      backend_(*state.backend),
      values_(program.values.size()),
      grads_(program.values.size()),
      weight_copies_(program.params.size()) {}

Tensor& Executor::grad_of(ValueId v, bool fresh) {
  Tensor& g = grads_[v];
  if (!g.defined()) {
    // fp32 whatever the value's dtype: backward kernels accumulate into it.
    g = Tensor(*allocator_, program_.values[v].shape, MemoryCategory::kTemporaries, DType::kF32);
    if (!fresh) backend_.zero(g);
  }
  return g;
}

uint32_t Executor::fresh_grad_inputs(const Node& node) const {
  const uint32_t can = backend_.fresh_grad_inputs(node.kind);
  uint32_t fresh = 0;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const ValueId in = node.inputs[i];
    // Read twice by one op (add(x, x)): both gradients land in one buffer,
    // which must start from zeros.
    const bool once = std::count(node.inputs.begin(), node.inputs.end(), in) == 1;
    if (((can >> i) & 1) != 0 && once && !grads_[in].defined()) fresh |= 1u << i;
  }
  return fresh;
}

Bf16Use Executor::bf16_use(const Node& node) const {
  return program_.compute_dtype == DType::kBF16 ? backend_.bf16_use(node.kind) : Bf16Use::kNone;
}

const float* Executor::kernel_input(const Tensor& value, bool bf16_kernel,
                                    std::vector<Tensor>& staged, std::vector<DType>& dtypes) {
  if (value.dtype() != DType::kBF16 || bf16_kernel) {
    dtypes.push_back(value.dtype());
    return value.data();
  }
  staged.emplace_back(*allocator_, value.shape(), MemoryCategory::kTemporaries, DType::kF32);
  if (!dry_run()) backend_.convert(value, staged.back());
  dtypes.push_back(DType::kF32);
  return staged.back().data();
}

void Executor::set_param_source(ParamSource* source) {
  // The bf16 weight copies are cast from the state's masters.
  if (source && program_.compute_dtype != DType::kF32)
    throw std::logic_error("executor: a parameter source needs an fp32 program");
  source_ = source;
}

float* Executor::master(ParamId p) {
  if (!source_) return state_.params[p].data();
  float* data = source_->params[p];
  if (!data && !dry_run())
    throw std::logic_error("executor: " + program_.params[p].fqn + " is not gathered at " + label_);
  return data;
}

float* Executor::gradient(ParamId p) {
  if (!source_) return state_.grads[p].data();
  float* data = source_->grads[p];
  if (!data && !dry_run())
    throw std::logic_error("executor: no gradient buffer for " + program_.params[p].fqn + " at " +
                           label_);
  return data;
}

const float* Executor::weight(ParamId p, bool bf16_kernel) {
  if (!bf16_kernel) return master(p);
  Tensor& copy = weight_copies_[p];
  if (!copy.defined()) {
    copy =
        Tensor(*allocator_, program_.params[p].shape, MemoryCategory::kTemporaries, DType::kBF16);
    copied_params_.push_back(p);
    if (!dry_run()) backend_.convert(state_.params[p], copy);
  }
  return copy.data();
}

void Executor::cast_unit_weights(size_t first) {
  const int32_t unit = gather_unit(program_, schedule_.steps[first]);
  for (size_t i = first;
       i < schedule_.steps.size() && gather_unit(program_, schedule_.steps[i]) == unit; ++i) {
    const Node& node = program_.nodes[schedule_.steps[i].node];
    if (bf16_use(node) != Bf16Use::kAll) continue;
    for (ParamId p : node.params) weight(p, /*bf16_kernel=*/true);
  }
}

void Executor::release_weight_copies() {
  // Only the copies made, not every parameter's slot: this runs at every
  // unit boundary, and a scan of all slots made a run quadratic in layers.
  for (ParamId p : copied_params_) weight_copies_[p].reset();
  copied_params_.clear();
}

void Executor::release_values() {
  for (Tensor& v : values_) v.reset();
}

double Executor::run(const Batch& batch, ParamGradients gradients) {
  if (gradients == ParamGradients::kAccumulate && source_)
    throw std::logic_error("executor: a parameter source's gradients cannot accumulate over runs");
  param_gradients_ = gradients;
  counts_ = ExecutionCounts{};
  loss_ = 0;
  release_values();  // the previous step's loss
  using Clock = std::chrono::steady_clock;
  const Clock::time_point run_start = Clock::now();
  for (size_t i = 0; i < schedule_.steps.size(); ++i) {
    const Step& step = schedule_.steps[i];
    const Node& node = program_.nodes[step.node];
    label_ = std::string(to_string(step.kind)) + " " + node.fqn;
    allocator_->set_label(label_);
    if (source_) source_->before_step(i);
    if (observer_) observer_(step);
    const int32_t unit = gather_unit(program_, step);
    if (i == 0 || gather_unit(program_, schedule_.steps[i - 1]) != unit) cast_unit_weights(i);
    const Clock::time_point start = Clock::now();
    switch (step.kind) {
      case Step::Kind::kForward:
        forward(node, step.node, false, batch);
        break;
      case Step::Kind::kRecompute:
        forward(node, step.node, true, batch);
        break;
      case Step::Kind::kBackward:
        backward(step, batch);
        break;
    }
    for (ValueId v : step.free_after) values_[v].reset();
    if (i + 1 == schedule_.steps.size() || gather_unit(program_, schedule_.steps[i + 1]) != unit) {
      release_weight_copies();
    }
    if (profiling_) record_time(step, run_start, start);
  }
  if (source_) source_->after_run();
  release_weight_copies();  // the optimizer changes the masters before the next run
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
  const Bf16Use use = bf16_use(node);
  const bool bf16 = use != Bf16Use::kNone;
  OpBuffers b;
  std::vector<Tensor> staged;  // fp32 copies of bf16 values, for this step only
  for (ValueId in : node.inputs) {
    if (!values_[in].defined()) {
      throw std::logic_error("executor: " + program_.values[in].name + " is not live at " + label_);
    }
    b.inputs.push_back(kernel_input(values_[in], bf16, staged, b.input_dtypes));
  }
  for (ParamId p : node.params) {
    b.params.push_back(weight(p, use == Bf16Use::kAll));
    b.mutable_params.push_back(master(p));
  }
  b.param_dtype = use == Bf16Use::kAll ? DType::kBF16 : DType::kF32;
  b.is_recompute = recompute;
  // A recompute may rebuild an output that is still live (a node with one
  // kept and one dropped output): that copy goes to scratch and is dropped.
  std::vector<Tensor> outputs;
  std::vector<std::pair<size_t, size_t>> narrow;  // (staged, output) pairs
  for (ValueId out : node.outputs) {
    const bool kept = !recompute && schedule_.keep[out];
    const MemoryCategory category =
        kept ? MemoryCategory::kActivations : MemoryCategory::kTemporaries;
    const Value& value = program_.values[out];
    outputs.emplace_back(*allocator_, value.shape, category, value.dtype);
    if (value.dtype == DType::kBF16 && !bf16) {
      staged.emplace_back(*allocator_, value.shape, MemoryCategory::kTemporaries, DType::kF32);
      narrow.emplace_back(staged.size() - 1, outputs.size() - 1);
      b.outputs.push_back(staged.back().data());
      b.output_dtypes.push_back(DType::kF32);
    } else {
      b.outputs.push_back(outputs.back().data());
      b.output_dtypes.push_back(value.dtype);
    }
  }
  Tensor workspace = scratch(backend_.forward_workspace_bytes(node));
  b.workspace = workspace.data();
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
  if (!dry_run()) {
    const double loss = backend_.forward(node, b);
    if (node.outputs[0] == program_.loss && !recompute) loss_ = loss;
    for (auto [from, to] : narrow) backend_.convert(staged[from], outputs[to]);
  }
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    Tensor& live = values_[node.outputs[o]];
    if (live.defined()) continue;  // scratch: dropped with `outputs`
    live = std::move(outputs[o]);
  }
}

Tensor Executor::scratch(int64_t bytes) {
  if (bytes <= 0) return Tensor();
  return Tensor(*allocator_, {bytes / dtype_size(DType::kF32)}, MemoryCategory::kTemporaries);
}

int Executor::input_gradients(const Step& step, const Node& node, OpBuffers& b) {
  // The output's gradient becomes this input's (a sum's backward): the
  // kernel gets no buffer for it, and the move follows the kernel.
  const int taker =
      grad_output_taker(program_, node, [this](ValueId v) { return grads_[v].defined(); });
  // The first backward to reach a value's gradient overwrites it when its
  // kernel can (fresh): no memset of a buffer it would overwrite anyway.
  b.fresh_grad_inputs = fresh_grad_inputs(node);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (!carries_gradient(program_, node.inputs[i])) {  // offsets, indices: no buffer
      b.fresh_grad_inputs &= ~(1u << i);
      b.grad_inputs.push_back(nullptr);
      continue;
    }
    const bool fresh = ((b.fresh_grad_inputs >> i) & 1) != 0;
    if (((step.grads_over_inputs >> i) & 1) != 0) {
      // The input dies here: its buffer becomes its gradient, which the
      // kernel writes over it as it reads it.
      if (!fresh) throw std::logic_error("executor: an in-place gradient not fresh at " + label_);
      Tensor& g = grads_[node.inputs[i]];
      g = std::move(values_[node.inputs[i]]);
      g.recategorize(MemoryCategory::kTemporaries);
      b.grad_inputs.push_back(g.data());
      continue;
    }
    b.grad_inputs.push_back(static_cast<int>(i) == taker ? nullptr
                                                         : grad_of(node.inputs[i], fresh).data());
  }
  if (taker >= 0) b.fresh_grad_inputs &= ~(1u << taker);
  return taker;
}

void Executor::backward(const Step& step, const Batch& batch) {
  const Node& node = program_.nodes[step.node];
  const Bf16Use use = bf16_use(node);
  const bool bf16 = use != Bf16Use::kNone;
  OpBuffers b;
  std::vector<Tensor> staged;  // fp32 copies of bf16 saved values, for this step only
  for (ValueId v : saved_values(node)) {
    if (!values_[v].defined()) {
      throw std::logic_error("executor: saved value " + program_.values[v].name +
                             " is not live at " + label_);
    }
    b.inputs.push_back(kernel_input(values_[v], bf16, staged, b.input_dtypes));
  }
  for (ParamId p : node.params) {
    b.params.push_back(weight(p, use == Bf16Use::kAll));
    b.grad_params.push_back(gradient(p));
  }
  // The first writer of a parameter's gradient in the schedule overwrites
  // it: no memset of the parameter gradients per step.
  if (param_gradients_ == ParamGradients::kOverwrite) b.fresh_grad_params = step.fresh_grad_params;
  b.param_dtype = use == Bf16Use::kAll ? DType::kBF16 : DType::kF32;
  const OpInfo& info = op_info(node.kind);
  Tensor grad_output;  // bf16 kernels: the output's gradient rounded to bf16
  int taker = -1;      // grad_output_taker
  if (info.grad_in_place_of_input0) {
    // The input's buffer becomes its gradient: no second copy exists.
    const ValueId in = node.inputs[0];
    if (values_[in].dtype() != DType::kF32) {
      throw std::logic_error("executor: in-place gradient of a non-fp32 value at " + label_);
    }
    grads_[in] = std::move(values_[in]);
    grads_[in].recategorize(MemoryCategory::kTemporaries);
    b.grad_inputs.push_back(grads_[in].data());
  } else {
    taker = input_gradients(step, node, b);
    const Tensor& dy = grads_[node.outputs[0]];
    // The loss's own gradient is 1, which its op knows (no buffer).
    const bool is_loss = node.outputs[0] == program_.loss;
    if (!dy.defined() && !is_loss) {
      throw std::logic_error("executor: no gradient reaches " + node.fqn);
    }
    b.grad_output = is_loss ? nullptr : dy.data();
    if (use == Bf16Use::kAll && !is_loss) {
      grad_output = Tensor(*allocator_, dy.shape(), MemoryCategory::kTemporaries, DType::kBF16);
      if (!dry_run()) backend_.convert(dy, grad_output);
      b.grad_output = grad_output.data();
      b.grad_output_dtype = DType::kBF16;
    }
  }
  Tensor workspace = scratch(backend_.workspace_bytes(node));
  b.workspace = workspace.data();
  b.tokens = batch.inputs;
  b.targets = batch.targets;
  ++counts_.backward_ops;
  counts_.backward_matmuls += info.op_class == OpClass::kMatmul;
  counts_.backward_flops += backward_flops(node);
  // A backward that rebuilds what its forward made (the fused loss head's
  // logits) re-runs those FLOPs: hardware work, not model work.
  counts_.recompute_flops += backward_recompute_flops(node);
  if (!dry_run()) backend_.backward(node, b);
  if (taker >= 0) grads_[node.inputs[taker]] = std::move(grads_[node.outputs[0]]);
  // The gradient of this node's outputs has been consumed.
  for (ValueId out : node.outputs) grads_[out].reset();
}

}  // namespace remat
