// A test-only backend that proves the backend seam: it wraps the CPU
// backend, hands out storage it tracks, and before forwarding any call
// checks that every buffer it is handed is a live buffer of its own storage
// of exactly the size the program says. It counts calls, and claims not to
// be host-addressable, so every host access takes the staged-copy path a
// device backend would.
#pragma once

#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "ac/plan.h"
#include "runtime/backend.h"

namespace remat::testing {

class CheckingBackend final : public Backend {
 public:
  explicit CheckingBackend(const Program& program) : program_(program) {}

  struct Calls {
    int64_t forward = 0, backward = 0, zero = 0, copy = 0, to_host = 0, from_host = 0;
    int64_t sum_squares = 0, scale = 0, adamw = 0, expert_bias = 0;
    // Bytes zero() and zero_range() cleared: all, and those of tensors booked
    // as gradients (the model state's parameter gradients).
    int64_t zeroed_bytes = 0, zeroed_gradient_bytes = 0;
  };
  const Calls& calls() const { return calls_; }
  int64_t live_buffers() const { return static_cast<int64_t>(live_.size()); }

  const char* name() const override { return "checking"; }
  std::unique_ptr<Storage> make_storage() override { return std::make_unique<Tracked>(*this); }
  bool host_addressable() const override { return false; }

  void zero(Tensor& t) override {
    ++calls_.zero;
    check(t);
    count_zeroed(t, t.bytes());
    cpu().zero(t);
  }
  void zero_range(Tensor& t, int64_t first, int64_t count) override {
    ++calls_.zero;
    check(t);
    count_zeroed(t, bytes_of(count, t.dtype()));
    cpu().zero_range(t, first, count);
  }
  void copy(const Tensor& src, Tensor& dst) override {
    ++calls_.copy;
    check(src);
    check(dst);
    cpu().copy(src, dst);
  }
  void copy_to_host(const Tensor& src, void* dst) override {
    ++calls_.to_host;
    check(src);
    std::memcpy(dst, src.raw(), static_cast<size_t>(src.bytes()));
  }
  void copy_from_host(const void* src, Tensor& dst) override {
    ++calls_.from_host;
    check(dst);
    std::memcpy(dst.raw(), src, static_cast<size_t>(dst.bytes()));
  }

  double forward(const Node& node, const OpBuffers& b) override {
    ++calls_.forward;
    check_forward(node, b);
    return cpu().forward(node, b);
  }
  void backward(const Node& node, const OpBuffers& b) override {
    ++calls_.backward;
    check_backward(node, b);
    cpu().backward(node, b);
  }
  uint32_t fresh_grad_inputs(OpKind kind) const override {
    return cpu_backend().fresh_grad_inputs(kind);
  }

  double sum_squares(const Tensor& t) override {
    ++calls_.sum_squares;
    check(t);
    return cpu().sum_squares(t);
  }
  void scale(Tensor& t, float factor) override {
    ++calls_.scale;
    check(t);
    cpu().scale(t, factor);
  }
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                    const AdamWStep& step) override {
    ++calls_.adamw;
    for (const Tensor* t : std::initializer_list<const Tensor*>{&param, &grad, &m, &v}) {
      check(*t);
    }
    cpu().adamw_update(param, grad, m, v, step);
  }
  void update_expert_bias(Tensor& bias, Tensor& counts, float coeff) override {
    ++calls_.expert_bias;
    check(bias);
    check(counts);
    cpu().update_expert_bias(bias, counts, coeff);
  }

  // Throws unless `pointer` starts a live buffer of this backend's storage
  // of exactly `bytes` bytes.
  void check_buffer(const void* pointer, int64_t bytes, const std::string& what) const {
    auto it = live_.find(pointer);
    if (it == live_.end())
      throw std::logic_error("checking backend: " + what + " is not a live buffer");
    if (it->second != bytes)
      throw std::logic_error("checking backend: " + what + " has " + std::to_string(it->second) +
                             " bytes, expected " + std::to_string(bytes));
  }

 private:
  // Host memory whose live buffers the backend tracks.
  class Tracked final : public Storage {
   public:
    explicit Tracked(CheckingBackend& owner) : owner_(owner) {}
    void* allocate(int64_t bytes) override {
      void* p = host_.allocate(bytes);
      owner_.live_[p] = bytes;
      return p;
    }
    void release(void* pointer, int64_t bytes) override {
      owner_.check_buffer(pointer, bytes, "a released buffer");
      owner_.live_.erase(pointer);
      host_.release(pointer, bytes);
    }
    int64_t cached_bytes() const override { return host_.cached_bytes(); }

   private:
    CheckingBackend& owner_;
    HostStorage host_;
  };

  static Backend& cpu() { return cpu_backend(); }

  void count_zeroed(const Tensor& t, int64_t bytes) {
    calls_.zeroed_bytes += bytes;
    if (t.category() == MemoryCategory::kGradients) calls_.zeroed_gradient_bytes += bytes;
  }

  void check(const Tensor& t) const {
    if (t.raw() != nullptr || t.numel() > 0) check_buffer(t.raw(), t.bytes(), "a tensor");
  }
  int64_t value_bytes(ValueId v) const { return program_.values[v].bytes(); }
  int64_t param_bytes(ParamId p) const {
    return bytes_of(numel(program_.params[p].shape), program_.params[p].dtype);
  }

  void check_forward(const Node& node, const OpBuffers& b) const {
    const std::string at = " of " + node.fqn;
    expect_count(b.inputs.size(), node.inputs.size(), "inputs" + at);
    for (size_t i = 0; i < b.inputs.size(); ++i)
      check_buffer(b.inputs[i], value_bytes(node.inputs[i]), "input" + at);
    expect_count(b.outputs.size(), node.outputs.size(), "outputs" + at);
    for (size_t i = 0; i < b.outputs.size(); ++i)
      check_buffer(b.outputs[i], value_bytes(node.outputs[i]), "output" + at);
    for (size_t i = 0; i < b.params.size(); ++i)
      check_buffer(b.params[i], param_bytes(node.params[i]), "parameter" + at);
  }

  void check_backward(const Node& node, const OpBuffers& b) const {
    const std::string at = " of " + node.fqn + " (backward)";
    const std::vector<ValueId> saved = saved_values(node);
    expect_count(b.inputs.size(), saved.size(), "saved values" + at);
    for (size_t i = 0; i < saved.size(); ++i)
      check_buffer(b.inputs[i], value_bytes(saved[i]), "saved value" + at);
    int handed = 0;  // inputs whose gradient is the output's (no buffer)
    for (size_t i = 0; i < b.grad_inputs.size(); ++i) {
      if (!carries_gradient(program_, node.inputs[i])) {  // offsets, indices
        if (b.grad_inputs[i] != nullptr || ((b.fresh_grad_inputs >> i) & 1) != 0)
          throw std::logic_error("checking backend: a gradient buffer for an input that gets none" +
                                 at);
        continue;
      }
      if (b.grad_inputs[i] == nullptr && op_info(node.kind).grad_output_becomes_input_grad) {
        if (++handed > 1 || ((b.fresh_grad_inputs >> i) & 1) != 0)
          throw std::logic_error(
              "checking backend: a null input gradient that is fresh, or "
              "more than one" +
              at);
        continue;
      }
      check_buffer(b.grad_inputs[i], value_bytes(node.inputs[i]), "input gradient" + at);
    }
    for (size_t i = 0; i < b.grad_params.size(); ++i)
      check_buffer(b.grad_params[i], param_bytes(node.params[i]), "parameter gradient" + at);
    if (b.grad_output != nullptr)
      check_buffer(b.grad_output, value_bytes(node.outputs[0]), "output gradient" + at);
    if (b.workspace != nullptr)
      check_buffer(b.workspace, backward_workspace_bytes(node), "workspace" + at);
    for (size_t i = 0; i < 32; ++i) {
      if (((b.fresh_grad_params >> i) & 1) == 0) continue;
      if (i >= node.params.size() || !program_.params[node.params[i]].trainable)
        throw std::logic_error("checking backend: a fresh gradient of a parameter that gets none" +
                               at);
    }
  }

  static void expect_count(size_t got, size_t want, const std::string& what) {
    if (got != want)
      throw std::logic_error("checking backend: " + std::to_string(got) + " " + what +
                             ", expected " + std::to_string(want));
  }

  const Program& program_;
  std::map<const void*, int64_t> live_;
  Calls calls_;
};

}  // namespace remat::testing
