// The training state of a model: parameters, their gradients and the
// optimizer's moments, each accounted under its own memory category, and the
// backend their bytes belong to (allocated from its storage: the allocator
// must wrap storage the backend made, see runtime/backend.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "graph/program.h"
#include "runtime/backend.h"

namespace remat {

// kBuffersOnly: a sharded run's state (runtime/sharded_state.h) holds only
// the buffers (non-trainable parameters such as MoE expert_bias and token
// counts), in full on every rank; params[p] of a trainable p stays undefined
// and there are no gradients or moments here: those live in the shards.
enum class Holds { kEverything, kBuffersOnly };

// Draws parameter p's initial values (`n` = its numel) into host memory: the
// stream ModelState::initialize uses, so a shard can draw what it owns.
void draw_initial_values(const Param& p, uint64_t seed, float* host, int64_t n);

struct ModelState {
  ModelState(const Program& program, Allocator& allocator, bool with_gradients,
             Backend& backend = cpu_backend(), Holds holds = Holds::kEverything);

  // torchtitan's initialisation (spec.md §3), deterministic in `seed`: every
  // parameter draws from its own stream, seeded from `seed` and its FQN, so
  // the values do not depend on parameter order or on the other parameters.
  void initialize(uint64_t seed);
  // The constructor zeroes the gradients once: a buffer's (which no backward
  // writes) stays zero. Training steps need not: the executor's first writer
  // of each gradient overwrites it (runtime/executor.h, ParamGradients).
  void zero_gradients();
  // Allocates the AdamW moments (zeroed) on first use (kEverything only).
  void ensure_optimizer_state();

  const Program* program;
  Allocator* allocator;
  Backend* backend;
  Holds holds;
  std::vector<Tensor> params;
  std::vector<Tensor> grads;       // empty without gradients
  std::vector<Tensor> exp_avg;     // AdamW first moment
  std::vector<Tensor> exp_avg_sq;  // AdamW second moment
};

}  // namespace remat
