// The backend interface: everything that touches tensor bytes goes through
// it (the executor, model state, optimizer, checkpointing, load balancing),
// so a device, a bf16 path or a checking wrapper plugs in behind one table,
// in the spirit of ggml's backend table. One virtual call per op or per
// tensor, never inside a kernel's loops.
//
// Contracts:
//  - Tensors handed to a backend were allocated from storage it made
//    (make_storage(), wrapped by an Allocator that keeps the books);
//  - forward kernels overwrite their outputs, backward kernels accumulate
//    into every gradient (see kernels/cpu/kernels.h), except an op with
//    OpInfo::grad_in_place_of_input0 and the fresh input and parameter
//    gradients (OpBuffers::fresh_grad_inputs, fresh_grad_params), which they
//    overwrite; every backend honours fresh_grad_params for every op, and
//    skips a null grad_inputs[i] (OpInfo::grad_output_becomes_input_grad,
//    and inputs that carry no gradient: graph/program.h carries_gradient),
//    and lets a fresh grad_inputs[i] be the saved input's own buffer
//    (Step::grads_over_inputs, inputs of OpInfo::grads_over_saved_inputs);
//  - host memory is touched only through copy_to_host / copy_from_host (or
//    the helpers below), and only where data is inherently host data: files,
//    the initial weights, metrics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "graph/program.h"

namespace remat {

// What the kernels of an op take under bf16 compute (Program::compute_dtype),
// through the same pointers (OpBuffers' dtypes say which buffer is which).
// Gradients they accumulate into (inputs, parameters) are always fp32.
enum class Bf16Use {
  kNone,         // fp32 only: the executor widens bf16 values and narrows results
  kActivations,  // activations as the program stores them; fp32 weights, fp32 dy
  kAll,          // also the bf16 copies of its weights and a bf16 copy of dy
};

// The buffers of one op call. Pointers are the start of a tensor's bytes; a
// bf16 buffer travels through the same pointer (see Bf16Use).
struct OpBuffers {
  std::vector<const float*> inputs;
  std::vector<float*> outputs;
  std::vector<const float*> params;
  // The same parameters, writable: ops that update their own buffers (MoE
  // routing counts tokens per expert) write through these.
  std::vector<float*> mutable_params;
  // A forward re-run in the backward pass: it must not update any state.
  bool is_recompute = false;
  // Backward only. `inputs` then holds the saved values, in the order op.h
  // states (saved inputs, then saved outputs).
  const float* grad_output = nullptr;  // gradient of output 0
  // Accumulated into, unless fresh. Null for the input whose gradient the
  // output's gradient becomes (OpInfo::grad_output_becomes_input_grad): the
  // kernel writes nothing for it.
  std::vector<float*> grad_inputs;
  // Bit i: grad_inputs[i] holds no contribution yet and unspecified bytes
  // (the executor did not zero it); the backward overwrites it with the bits
  // accumulating into zeros would give. Only bits of fresh_grad_inputs(kind).
  uint32_t fresh_grad_inputs = 0;
  std::vector<float*> grad_params;  // accumulated into, unless fresh
  // Bit i: grad_params[i] holds no contribution yet and unspecified bytes
  // (no one zeroed it this step: Step::fresh_grad_params); the backward
  // overwrites it with the bits accumulating into zeros would give, zeros
  // included where it has no contribution (an MoE expert without tokens, an
  // embedding row no token reads).
  uint32_t fresh_grad_params = 0;
  float* workspace = nullptr;  // workspace_bytes(node) bytes
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  // Element types of inputs, outputs, params and grad_output (empty: all f32).
  std::vector<DType> input_dtypes, output_dtypes;
  DType param_dtype = DType::kF32;
  DType grad_output_dtype = DType::kF32;
};

// torch.optim.AdamW's hyperparameters for one step; `step` counts from 1.
// grad_scale is gradient clipping's factor, applied as the gradients are
// read (g * grad_scale, rounded once: the bits clip_grad_norm_'s in-place
// multiply would leave), so clipping needs no pass of its own over them.
struct AdamWStep {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 1;
  float grad_scale = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Raw storage for an Allocator, which keeps the books above it.
  virtual std::unique_ptr<Storage> make_storage() = 0;
  // Whether the host can read and write this backend's buffers in place
  // (then the host helpers below copy nothing).
  virtual bool host_addressable() const = 0;

  virtual void zero(Tensor& t) = 0;
  // Zeroes elements [first, first + count) of an f32 tensor.
  virtual void zero_range(Tensor& t, int64_t first, int64_t count) = 0;
  // dst and src have the same dtype and numel.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // t.bytes() bytes between the tensor and host memory.
  virtual void copy_to_host(const Tensor& src, void* dst) = 0;
  virtual void copy_from_host(const void* src, Tensor& dst) = 0;

  // dst = src rounded to dst's dtype (f32 <-> bf16, same numel): bf16.h's
  // rounding. The default goes through host copies; a backend whose memory
  // the host cannot address should convert in place.
  virtual void convert(const Tensor& src, Tensor& dst);
  // Which bf16 buffers the kernels of `kind` take (see Bf16Use).
  virtual Bf16Use bf16_use(OpKind /*kind*/) const { return Bf16Use::kNone; }

  // Runs one op; returns the loss for the loss op, 0 otherwise.
  virtual double forward(const Node& node, const OpBuffers& buffers) = 0;
  virtual void backward(const Node& node, const OpBuffers& buffers) = 0;
  // The input gradients (bit i: input i) that the backward of `kind` can
  // take fresh (OpBuffers::fresh_grad_inputs): the executor skips zeroing a
  // gradient buffer whose first writer overwrites it. 0: zero them all.
  virtual uint32_t fresh_grad_inputs(OpKind /*kind*/) const { return 0; }
  // Scratch the backward of `node` needs (the op table's, for every backend
  // so far: the planner books the same bytes without a backend).
  virtual int64_t workspace_bytes(const Node& node) { return backward_workspace_bytes(node); }
  // Scratch the forward of `node` needs (likewise the op table's).
  virtual int64_t forward_workspace_bytes(const Node& node) {
    return ::remat::forward_workspace_bytes(node);
  }

  // Sum of squares in double, in a fixed order (deterministic).
  virtual double sum_squares(const Tensor& t) = 0;
  virtual void scale(Tensor& t, float factor) = 0;
  virtual void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            const AdamWStep& step) = 0;
  // MoE load balancing (train/load_balance.h): moves expert_bias towards
  // the under-used experts by `coeff`, then zeroes counts.
  virtual void update_expert_bias(Tensor& expert_bias, Tensor& counts, float coeff) = 0;
};

// The CPU backend (runtime/cpu_backend.cc): host memory, kernels/cpu.
Backend& cpu_backend();

// Host access to an f32 tensor, for inherently host data. On a
// host-addressable backend these are the tensor's own bytes (no copy);
// otherwise a staged copy.
class HostView {
 public:
  HostView(Backend& backend, const Tensor& t);
  const float* data() const { return data_; }

 private:
  std::vector<float> staged_;
  const float* data_;
};

// Calls write(float* host) on the f32 tensor's bytes (or on a staged copy,
// then copied to the tensor).
template <typename Write>
void write_from_host(Backend& backend, Tensor& t, Write write) {
  if (t.raw() == nullptr && t.numel() > 0) return;  // counting-only
  if (backend.host_addressable()) {
    write(t.data());
    return;
  }
  std::vector<float> staged(static_cast<size_t>(t.numel()));
  write(staged.data());
  backend.copy_from_host(staged.data(), t);
}

}  // namespace remat
