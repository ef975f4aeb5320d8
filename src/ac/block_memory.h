// The memory a block's own choice of what to keep costs, without replaying
// the program: the model the budget solver (budget.h) searches with.
//
// Why it is exact. The executor's books at any moment are a sum over
// buffers, and which values of block b are kept or rebuilt changes only the
// lifetimes of block b's own values. So at a moment inside block b's forward
// window (its forward steps) or backward window (its recompute and backward
// steps), the books are
//     (what a reference replay held when the window opened, less block b's
//      reference keep-set) + P_b + (block b's own events since then),
// and at any moment outside every window they are that reference level with
// every block's keep-set swapped in. P_b is the bytes blocks 0..b-1 keep for
// their backward passes. The own events of a window are simulated here with
// the executor's rules (a value is booked when produced, a gradient when its
// first consumer's backward asks for it, a workspace for one step, a value
// rebuilt while a kept copy is live goes to scratch for one step), which the
// tests hold to the replay for random plans of every model.
//
// A block's choice is the set R of its nodes the backward re-runs: a node
// not in R keeps every output the backward needs; a node in R keeps only its
// pinned outputs (see BlockShape). Keeping some outputs of a
// node that is re-run anyway never helps (the kept copy is live at every
// moment the rebuilt one would be, and longer) and keeping an output nobody
// reads is never done, so this set of choices loses nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/program.h"

namespace remat {

// What the executor books for an op's steps beyond the values it produces
// and the gradients it writes, per program node, in bytes before the
// booking scale (runtime/executor.h step_bookings fills it from the backend,
// which decides what each op's kernels take in bf16):
struct StepBookings {
  // Live during the node's forward (or recompute) step only: fp32 copies of
  // bf16 inputs and outputs for an fp32 kernel, the forward's workspace.
  std::vector<int64_t> forward_scratch;
  // Live during its backward step only: fp32 copies of bf16 saved values,
  // the bf16 copy of a bf16 matmul's output gradient, the workspace.
  std::vector<int64_t> backward_scratch;
  // The bf16 copies of its weights, cast at the start of each window of its
  // gather unit and released at its end.
  std::vector<int64_t> weight_copies;
};

// Recompute cost of one op: FLOPs, or measured seconds (budget.h).
using OpCost = std::function<double(const Node&)>;

struct BlockOption {
  std::vector<bool> recompute;  // per node of the block, in program order
  int64_t kept_bytes = 0;       // own values kept from forward to this block's backward
  int64_t forward_peak = 0;     // highest own level in the forward window (from 0)
  int64_t backward_peak = 0;    // highest level in the backward window above the level
                                // at its start (which holds kept_bytes)
  double cost = 0;              // recompute cost
};

// The static facts of one block that the simulation needs. Blocks with equal
// signatures (same ops, shapes and wiring) have equal options.
struct BlockShape {
  int32_t block = -1;
  int32_t first = 0, last = -1;  // node range [first, last]
  std::string signature;
  double scale = 1.0;  // booking scale of activations and temporaries
  // Per own value (indexed value - first_value): bytes as booked, and facts.
  ValueId first_value = 0;
  int32_t n_values = 0;
  std::vector<int64_t> bytes;
  std::vector<bool> boundary;            // read by a node outside the block
  std::vector<bool> forced;              // kept whatever the choice (boundary, routing)
  std::vector<bool> pinned;              // forced, or outside a limited decision space
  std::vector<bool> saved;               // read by some backward of the block
  std::vector<bool> grad_live_at_start;  // its gradient exists when the backward window opens
  std::vector<int64_t> grad_bytes;       // its gradient as booked: fp32 whatever its dtype
  // Values produced elsewhere whose gradients this window books first, and
  // whose buffers it frees: node offset -> bytes.
  std::vector<int64_t> foreign_grad_bytes;   // per block node: bytes booked by its backward
  std::vector<int64_t> foreign_freed_bytes;  // per block node: freed after its backward
  std::vector<int64_t> workspace_bytes;      // per block node: its backward's scratch
  // Per block node: the bytes of the output gradient its backward hands to
  // an input as that input's gradient (grad_output_taker), booked once.
  std::vector<int64_t> grad_output_taken;
  // Per block node: the inputs that become their own gradients in place
  // where the choice lets them die at its backward (grad_may_overwrite_input).
  std::vector<uint32_t> grads_over_inputs;
  std::vector<int64_t> forward_scratch;  // per block node: its forward's scratch
  // The block's bf16 weight copies, live through each of its windows.
  int64_t weight_copies = 0;
};

// `decidable` (per program value, empty = all) limits which values may be
// rebuilt: a node with a needed output that is not decidable is never re-run.
// `scale` is the allocator's booking scale for activations and temporaries.
BlockShape describe_block(const Program& program, int32_t block, double scale,
                          const StepBookings& bookings, const std::vector<bool>& decidable);

// Every choice of the block that is not dominated (no other choice is at
// most as large in kept bytes, forward peak, kept + backward peak and cost).
std::vector<BlockOption> block_options(const Program& program, const BlockShape& shape,
                                       const OpCost& cost, const std::vector<bool>& decidable);

// The simulation of one choice (exposed for tests).
BlockOption simulate_block(const Program& program, const BlockShape& shape,
                           const std::vector<bool>& recompute, const OpCost& cost);

}  // namespace remat
