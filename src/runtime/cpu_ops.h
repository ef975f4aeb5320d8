// The bridge from graph nodes to CPU kernels: unpacks a node's attrs and
// buffers into a kernel call. No policy, no memory management.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/program.h"

namespace remat {

struct OpBuffers {
  std::vector<const float*> inputs;
  std::vector<float*> outputs;
  std::vector<const float*> params;
  // The same parameters, writable: ops that update their own buffers (MoE
  // routing counts tokens per expert) write through these.
  std::vector<float*> mutable_params;
  // A forward re-run in the backward pass: it must not update any state.
  bool is_recompute = false;
  // Backward only.
  const float* grad_output = nullptr;      // gradient of output 0
  std::vector<float*> grad_inputs;         // accumulated into
  std::vector<float*> grad_params;         // accumulated into
  float* workspace = nullptr;
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
};

// Returns the loss for the loss op, 0 otherwise.
double cpu_forward(const Node& node, const OpBuffers& b);
void cpu_backward(const Node& node, const OpBuffers& b);

}  // namespace remat
