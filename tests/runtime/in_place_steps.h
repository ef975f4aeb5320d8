// What the schedule marks as gradients over their inputs, and what those
// steps cost, for the executor tests of dense and MoE models alike.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "runtime/executor.h"

namespace remat {

// A node's module inside its block: "layers.3.moe.experts.w2" -> "moe.experts.w2".
inline std::string module_in_block(const std::string& fqn) {
  return fqn.substr(fqn.find('.', fqn.find('.') + 1) + 1);
}

// Expects every backward step to mark exactly `expected[module]` (0 for
// modules not named) as gradients over its inputs; returns how many
// backward steps are so marked.
inline int expect_marked_inputs(const Program& program, const Schedule& schedule,
                                const std::map<std::string, uint32_t>& expected) {
  int marked = 0;
  for (const Step& step : schedule.steps) {
    if (step.kind != Step::Kind::kBackward) continue;
    const std::string& fqn = program.nodes[step.node].fqn;
    const auto it = expected.find(module_in_block(fqn));
    EXPECT_EQ(step.grads_over_inputs, it == expected.end() ? 0u : it->second) << fqn;
    marked += step.grads_over_inputs != 0;
  }
  return marked;
}

// Runs one step and returns the most the books rose, during any step whose
// inputs become their own gradients, above their level when it began: 0
// when those gradients take no new buffer.
inline int64_t booked_by_in_place_steps(const Program& program, const Schedule& schedule,
                                        const Batch& batch) {
  Allocator allocator;
  ModelState state(program, allocator, true);
  state.initialize(3);
  Executor ex(program, schedule, allocator, state);
  const Step* current = nullptr;
  int64_t at_start = 0, highest_above = 0;
  ex.set_step_observer([&](const Step& step) {
    current = &step;
    at_start = allocator.current().total();
  });
  allocator.set_listener([&](const MemorySnapshot& now) {
    if (current != nullptr && current->grads_over_inputs != 0)
      highest_above = std::max(highest_above, now.total() - at_start);
  });
  ex.run(batch);
  allocator.set_listener({});
  return highest_above;
}

}  // namespace remat
