#include "ac/schedule.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <unordered_map>

namespace remat {

const char* to_string(Step::Kind kind) {
  switch (kind) {
    case Step::Kind::kForward:
      return "forward";
    case Step::Kind::kRecompute:
      return "recompute";
    case Step::Kind::kBackward:
      return "backward";
  }
  return "?";
}

namespace {

// Step::fresh_grad_params: the first backward step to reach each trainable
// parameter, in the order the steps run.
void mark_first_gradient_writers(const Program& program, Schedule& schedule) {
  std::vector<bool> written(program.params.size(), false);
  for (Step& step : schedule.steps) {
    if (step.kind != Step::Kind::kBackward) continue;
    const std::vector<ParamId>& params = program.nodes[step.node].params;
    if (params.size() > 32) throw std::logic_error("schedule: more than 32 parameters in a node");
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamId p = params[i];
      if (!program.params[p].trainable) continue;
      // One node reading a parameter twice would hand its kernel one buffer
      // as two gradients, of which neither may start by overwriting.
      if (std::count(params.begin(), params.end(), p) != 1)
        throw std::logic_error("schedule: " + program.nodes[step.node].fqn + " lists parameter " +
                               program.params[p].fqn + " twice");
      if (!written[p]) step.fresh_grad_params |= 1u << i;
      written[p] = true;
    }
  }
}

// Step::grads_over_inputs: an input that may hold its own gradient and dies
// at this backward step becomes that gradient instead of being freed.
void mark_gradients_over_inputs(const Program& program, Schedule& schedule) {
  const ValueReaders readers = value_readers(program);
  for (auto& step : schedule.steps) {
    if (step.kind != Step::Kind::kBackward) continue;
    const Node& node = program.nodes[step.node];
    if (op_info(node.kind).grads_over_saved_inputs == 0) continue;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      auto& freed = step.free_after;
      const auto it = std::find(freed.begin(), freed.end(), node.inputs[i]);
      if (it == freed.end() || !grad_may_overwrite_input(program, readers, step.node, i)) continue;
      freed.erase(it);
      step.grads_over_inputs |= 1u << i;
    }
  }
}

// The steps in the order they run: every forward step, then, block by block
// from the last, the block's recomputed nodes (in forward order) and its
// backward steps.
std::vector<Step> steps_in_order(const Program& program, const Plan& plan, bool with_backward) {
  std::vector<Step> steps;
  const auto n_nodes = static_cast<int32_t>(program.nodes.size());
  for (int32_t n = 0; n < n_nodes; ++n) steps.push_back({Step::Kind::kForward, n, {}});
  if (!with_backward) return steps;
  // Each block's recomputed nodes in forward order, gathered in one pass:
  // scanning every node at each block boundary made a schedule quadratic in
  // the number of layers.
  std::unordered_map<int32_t, std::vector<int32_t>> recomputed_in_block;
  for (int32_t r = 0; r < n_nodes; ++r) {
    if (plan.recompute[r]) recomputed_in_block[program.nodes[r].block].push_back(r);
  }
  std::optional<int32_t> current_block;  // none before the first backward step
  for (int32_t n = n_nodes - 1; n >= 0; --n) {
    const int32_t block = program.nodes[n].block;
    if (block != current_block) {
      current_block = block;
      // Rebuild what this block's backward needs before any of its
      // backward steps run.
      const auto recomputed = recomputed_in_block.find(block);
      if (recomputed != recomputed_in_block.end()) {
        for (int32_t r : recomputed->second) steps.push_back({Step::Kind::kRecompute, r, {}});
      }
    }
    steps.push_back({Step::Kind::kBackward, n, {}});
  }
  return steps;
}

}  // namespace

Schedule make_schedule(const Program& program, const Plan& plan, bool with_backward) {
  Schedule schedule;
  schedule.with_backward = with_backward;
  schedule.keep = with_backward ? plan.keep : std::vector<bool>(program.values.size(), false);
  schedule.steps = steps_in_order(program, plan, with_backward);
  if (with_backward) mark_first_gradient_writers(program, schedule);

  // A value lives from its producer's forward step to its last forward
  // reader, unless the plan keeps it, in which case it lives on into the
  // backward phase. A recomputed value has a second life, from its recompute
  // step to its last backward-phase reader.
  const size_t n_values = program.values.size();
  auto survives_forward = [&](ValueId v) {
    return v == program.loss || (with_backward && plan.keep[v]);
  };
  std::vector<int64_t> forward_last(n_values, -1);
  std::vector<int64_t> backward_last(n_values, -1);
  std::vector<bool> moved_into_grad(n_values, false);
  for (size_t s = 0; s < schedule.steps.size(); ++s) {
    const Step& step = schedule.steps[s];
    const Node& node = program.nodes[step.node];
    const auto idx = static_cast<int64_t>(s);
    switch (step.kind) {
      case Step::Kind::kForward:
        for (ValueId v : node.inputs) forward_last[v] = idx;
        for (ValueId out : node.outputs) forward_last[out] = std::max(forward_last[out], idx);
        break;
      case Step::Kind::kRecompute:
        for (ValueId v : node.inputs) backward_last[v] = idx;
        for (ValueId out : node.outputs) backward_last[out] = std::max(backward_last[out], idx);
        break;
      case Step::Kind::kBackward:
        for (ValueId v : saved_values(node)) backward_last[v] = idx;
        if (op_info(node.kind).grad_in_place_of_input0) moved_into_grad[node.inputs[0]] = true;
        break;
    }
  }
  for (size_t i = 0; i < n_values; ++i) {
    const auto v = static_cast<ValueId>(i);
    if (!survives_forward(v)) {
      schedule.steps[forward_last[v]].free_after.push_back(v);
    }
    if (v == program.loss || moved_into_grad[v]) continue;  // the trainer reads the
    // loss; a buffer moved into its gradient is released as that gradient
    const bool lives_in_backward =
        plan.keep[v] || (with_backward && plan.recompute[program.values[v].producer]);
    if (with_backward && lives_in_backward) {
      if (backward_last[v] < 0) {
        throw std::logic_error("kept value never read by the backward pass: " +
                               program.values[v].name);
      }
      schedule.steps[backward_last[v]].free_after.push_back(v);
    }
  }
  if (with_backward) mark_gradients_over_inputs(program, schedule);
  return schedule;
}

}  // namespace remat
