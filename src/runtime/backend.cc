#include "runtime/backend.h"

namespace remat {

HostView::HostView(Backend& backend, const Tensor& t) : data_(t.data()) {
  if (backend.host_addressable() || t.raw() == nullptr) return;
  staged_.resize(static_cast<size_t>(t.numel()));
  backend.copy_to_host(t, staged_.data());
  data_ = staged_.data();
}

}  // namespace remat
