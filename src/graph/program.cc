#include "graph/program.h"

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

}  // namespace remat
