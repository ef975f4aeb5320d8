#include "runtime/backend.h"

#include <stdexcept>

#include "kernels/cpu/bf16.h"

namespace remat {

void Backend::convert(const Tensor& src, Tensor& dst) {
  if (src.numel() != dst.numel()) throw std::logic_error("convert: tensors differ in numel");
  if (src.raw() == nullptr || dst.raw() == nullptr) return;  // counting-only
  std::vector<float> wide(static_cast<size_t>(src.numel()));
  if (src.dtype() == DType::kF32) {
    copy_to_host(src, wide.data());
  } else {
    std::vector<cpu::bf16> narrow(wide.size());
    copy_to_host(src, narrow.data());
    cpu::widen_from_bf16(narrow.data(), src.numel(), wide.data());
  }
  if (dst.dtype() == DType::kF32) {
    copy_from_host(wide.data(), dst);
  } else {
    std::vector<cpu::bf16> narrow(wide.size());
    cpu::narrow_to_bf16(wide.data(), dst.numel(), narrow.data());
    copy_from_host(narrow.data(), dst);
  }
}

HostView::HostView(Backend& backend, const Tensor& t) : data_(t.data()) {
  if (backend.host_addressable() || t.raw() == nullptr) return;
  staged_.resize(static_cast<size_t>(t.numel()));
  backend.copy_to_host(t, staged_.data());
  data_ = staged_.data();
}

}  // namespace remat
