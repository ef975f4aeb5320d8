// The CPU backend: host memory (HostStorage) and the kernels of
// src/kernels/cpu, reached through the op table of cpu_ops.cc.
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"
#include "runtime/backend.h"
#include "runtime/cpu_ops.h"

namespace remat {

namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  std::unique_ptr<Storage> make_storage() override { return std::make_unique<HostStorage>(); }
  bool host_addressable() const override { return true; }

  void zero(Tensor& t) override {
    if (t.raw()) std::memset(t.raw(), 0, static_cast<size_t>(t.bytes()));
  }
  void zero_range(Tensor& t, int64_t first, int64_t count) override {
    if (first < 0 || count < 0 || first + count > t.numel())
      throw std::logic_error("cpu zero_range: elements outside the tensor");
    if (t.raw()) std::memset(t.data() + first, 0, sizeof(float) * static_cast<size_t>(count));
  }
  void copy(const Tensor& src, Tensor& dst) override {
    if (src.bytes() != dst.bytes() || src.dtype() != dst.dtype())
      throw std::logic_error("cpu copy: tensors differ in size or dtype");
    if (src.raw()) std::memcpy(dst.raw(), src.raw(), static_cast<size_t>(src.bytes()));
  }
  void copy_to_host(const Tensor& src, void* dst) override {
    if (src.raw()) std::memcpy(dst, src.raw(), static_cast<size_t>(src.bytes()));
  }
  void copy_from_host(const void* src, Tensor& dst) override {
    if (dst.raw()) std::memcpy(dst.raw(), src, static_cast<size_t>(dst.bytes()));
  }

  void convert(const Tensor& src, Tensor& dst) override {
    if (src.numel() != dst.numel()) throw std::logic_error("cpu convert: tensors differ in numel");
    if (src.raw() == nullptr) return;
    if (src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) {
      cpu::narrow_to_bf16(src.data(), src.numel(), static_cast<cpu::bf16*>(dst.raw()));
    } else if (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32) {
      cpu::widen_from_bf16(static_cast<const cpu::bf16*>(src.raw()), src.numel(), dst.data());
    } else {
      copy(src, dst);
    }
  }
  // The matmuls: bf16 operands and fp32 accumulation on the bf16 GEMMs
  // (onednn, native); on the fallback, whose GEMM computes in fp32, bf16
  // activations with the fp32 master weights and dy as they are (no copies
  // rounded to bf16 only to be widened back). The pointwise ops and attention
  // read and write bf16 activations, computing in fp32 (kernels/cpu/bf16.h).
  Bf16Use bf16_use(OpKind kind) const override {
    switch (kind) {
      case OpKind::kLinear:
      case OpKind::kGroupedLinear:
      case OpKind::kLinearCrossEntropy:
        return cpu::bf16_operands(cpu::bf16_gemm()) ? Bf16Use::kAll : Bf16Use::kActivations;
      case OpKind::kRmsNorm:
      case OpKind::kRope:
      case OpKind::kSiluMul:
      case OpKind::kAdd:
      case OpKind::kAttention:
        return Bf16Use::kActivations;
      default:
        return Bf16Use::kNone;
    }
  }

  double forward(const Node& node, const OpBuffers& buffers) override {
    return cpu_forward(node, buffers);
  }
  void backward(const Node& node, const OpBuffers& buffers) override {
    cpu_backward(node, buffers);
  }
  uint32_t fresh_grad_inputs(OpKind kind) const override { return cpu_fresh_grad_inputs(kind); }

  double sum_squares(const Tensor& t) override { return cpu::sum_squares(t.data(), t.numel()); }
  void scale(Tensor& t, float factor) override { cpu::scale_inplace(t.data(), t.numel(), factor); }
  void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                    const AdamWStep& s) override {
    cpu::adamw_update(param.data(), grad.data(), exp_avg.data(), exp_avg_sq.data(), param.numel(),
                      s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step, s.grad_scale);
  }
  void update_expert_bias(Tensor& expert_bias, Tensor& counts, float coeff) override {
    cpu::update_expert_bias(expert_bias.data(), counts.data(), counts.numel(), coeff);
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace remat
