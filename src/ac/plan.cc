#include "ac/plan.h"

namespace remat {

const char* to_string(MatmulReason reason) {
  switch (reason) {
    case MatmulReason::kNoCheckpointing:
      return "kept (no AC in this block)";
    case MatmulReason::kFullCheckpointing:
      return "recomputed (full AC in this block)";
    case MatmulReason::kKeptByAlternation:
      return "kept (alternation: odd)";
    case MatmulReason::kRecomputedByAlternation:
      return "recomputed (alternation: even)";
    case MatmulReason::kBelowThreshold:
      return "recomputed (below FLOP threshold)";
    case MatmulReason::kMatchedFilter:
      return "recomputed (matched filter)";
    case MatmulReason::kOutsideBlocks:
      return "kept (outside blocks)";
  }
  return "?";
}

std::vector<ValueId> saved_values(const Node& node) {
  const OpInfo& info = op_info(node.kind);
  std::vector<ValueId> saved;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (info.saved_inputs & (1u << i)) saved.push_back(node.inputs[i]);
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (info.saved_outputs & (1u << i)) saved.push_back(node.outputs[i]);
  }
  return saved;
}

Plan complete_plan(const Program& program, const std::vector<bool>& keep_wanted) {
  const size_t n_values = program.values.size();
  Plan plan;
  plan.keep.assign(n_values, false);
  plan.recompute.assign(program.nodes.size(), false);

  // A value produced in one block and read elsewhere is a block boundary:
  // it must survive, since recomputing it would mean re-running another block.
  std::vector<bool> boundary(n_values, false);
  for (const Node& node : program.nodes) {
    for (ValueId in : node.inputs) {
      if (program.nodes[program.values[in].producer].block != node.block) boundary[in] = true;
    }
  }
  boundary[program.loss] = true;

  // Walk nodes backwards: everything a later node's backward (or a later
  // recompute) needs is settled before we look at its producer.
  std::vector<bool> needed(n_values, false);
  for (const Node& node : program.nodes) {
    for (ValueId v : saved_values(node)) needed[v] = true;
  }
  needed[program.loss] = true;
  for (int32_t n = static_cast<int32_t>(program.nodes.size()) - 1; n >= 0; --n) {
    const Node& node = program.nodes[n];
    bool rebuild = false;
    const bool always_kept = op_info(node.kind).outputs_always_kept;
    for (ValueId out : node.outputs) {
      if (!needed[out]) continue;
      if (keep_wanted[out] || boundary[out] || always_kept) {
        plan.keep[out] = true;
      } else {
        rebuild = true;
      }
    }
    if (rebuild) {
      plan.recompute[n] = true;
      for (ValueId in : node.inputs) needed[in] = true;
    }
  }
  return plan;
}

int64_t Plan::kept_bytes(const Program& program) const {
  int64_t bytes = 0;
  for (size_t v = 0; v < keep.size(); ++v) {
    if (keep[v]) bytes += program.values[v].bytes();
  }
  return bytes;
}

int64_t Plan::recompute_flops(const Program& program) const {
  int64_t flops = 0;
  for (size_t n = 0; n < recompute.size(); ++n) {
    if (recompute[n]) flops += forward_flops(program.nodes[n]);
  }
  return flops;
}

int64_t Plan::recomputed_matmuls(const Program& program) const {
  int64_t count = 0;
  for (size_t n = 0; n < recompute.size(); ++n) {
    if (recompute[n] && op_info(program.nodes[n].kind).op_class == OpClass::kMatmul) ++count;
  }
  return count;
}

}  // namespace remat
