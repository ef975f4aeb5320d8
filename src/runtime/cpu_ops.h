// The CPU backend's op table: for each op kind, a forward and a backward
// that unpack the node's attrs and buffers into a kernels/cpu call. No
// policy, no memory management.
#pragma once

#include <cstdint>

#include "graph/program.h"
#include "runtime/backend.h"

namespace remat {

// Returns the loss for the loss op, 0 otherwise.
double cpu_forward(const Node& node, const OpBuffers& b);
void cpu_backward(const Node& node, const OpBuffers& b);
// The input gradients of `kind` that cpu_backward overwrites when fresh
// (Backend::fresh_grad_inputs).
uint32_t cpu_fresh_grad_inputs(OpKind kind);
// Whether the table registers both kernels of `kind` (the completeness test).
bool cpu_has_kernels(OpKind kind);

}  // namespace remat
