#include "ac/policy.h"

#include <sstream>
#include <stdexcept>

namespace remat {

bool fqn_matches(const std::string& fqn, const std::string& pattern) {
  // Glob "*pattern*" by backtracking over the last '*'.
  const std::string glob = "*" + pattern + "*";
  size_t f = 0, g = 0, star = std::string::npos, mark = 0;
  while (f < fqn.size()) {
    if (g < glob.size() && glob[g] == '*') {
      star = g++;
      mark = f;
    } else if (g < glob.size() && glob[g] == fqn[f]) {
      ++g;
      ++f;
    } else if (star != std::string::npos) {
      g = star + 1;
      f = ++mark;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

std::string describe(const AcOptions& options) {
  std::ostringstream s;
  switch (options.mode) {
    case AcOptions::Mode::kNone:
      return "none";
    case AcOptions::Mode::kFull:
      return "full";
    case AcOptions::Mode::kSelectiveLayer:
      s << "selective " << options.layer_frequency;
      return s.str();
    case AcOptions::Mode::kSelectiveOp:
      s << "selective op (threshold " << options.mm_flops_threshold << ", filter [";
      for (size_t i = 0; i < options.force_recompute_fqns.size(); ++i) {
        s << (i ? ", " : "") << options.force_recompute_fqns[i];
      }
      s << "])";
      return s.str();
    case AcOptions::Mode::kMemoryBudget:
      return "memory_budget " + options.memory_budget;
    case AcOptions::Mode::kAuto:
      return "auto";
  }
  return "?";
}

namespace {

bool block_checkpointed(const AcOptions& options, int32_t block) {
  switch (options.mode) {
    case AcOptions::Mode::kNone:
      return false;
    case AcOptions::Mode::kFull:
      return true;
    case AcOptions::Mode::kSelectiveLayer:
      // Blocks are counted from 1; N = 0 means every block.
      return options.layer_frequency <= 1 || (block + 1) % options.layer_frequency == 0;
    case AcOptions::Mode::kSelectiveOp:
      return false;
    case AcOptions::Mode::kMemoryBudget:
    case AcOptions::Mode::kAuto:
      break;
  }
  throw std::logic_error("make_plan: budget modes are solved by the planner");
}

}  // namespace

Plan make_plan(const Program& program, const AcOptions& options) {
  std::vector<bool> keep_wanted(program.values.size(), true);
  std::vector<MatmulDecision> matmuls;
  std::vector<bool> pattern_used(options.force_recompute_fqns.size(), false);

  int32_t current_block = -1;
  int64_t counter = 0;
  for (int32_t n = 0; n < static_cast<int32_t>(program.nodes.size()); ++n) {
    const Node& node = program.nodes[n];
    const OpClass op_class = op_info(node.kind).op_class;
    if (node.block != current_block) {
      current_block = node.block;
      counter = 0;  // the alternation restarts in every block
    }
    bool keep = true;
    MatmulDecision decision{n, true, MatmulReason::kOutsideBlocks, {}};
    if (node.block >= 0) {
      if (options.mode == AcOptions::Mode::kSelectiveOp) {
        if (op_class == OpClass::kMatmul) {
          decision.reason = MatmulReason::kRecomputedByAlternation;
          for (size_t p = 0; p < options.force_recompute_fqns.size(); ++p) {
            if (fqn_matches(node.fqn, options.force_recompute_fqns[p])) {
              pattern_used[p] = true;
              if (decision.reason != MatmulReason::kMatchedFilter) {
                decision.reason = MatmulReason::kMatchedFilter;
                decision.matched_pattern = options.force_recompute_fqns[p];
              }
            }
          }
          if (decision.reason != MatmulReason::kMatchedFilter &&
              static_cast<double>(forward_flops(node)) < options.mm_flops_threshold) {
            decision.reason = MatmulReason::kBelowThreshold;
          }
          if (decision.reason == MatmulReason::kRecomputedByAlternation) {
            ++counter;
            if (counter % 2 == 1) decision.reason = MatmulReason::kKeptByAlternation;
          }
          keep = decision.reason == MatmulReason::kKeptByAlternation;
        } else {
          keep = op_class == OpClass::kAttentionCore;
        }
      } else {
        keep = !block_checkpointed(options, node.block);
        decision.reason = keep ? MatmulReason::kNoCheckpointing : MatmulReason::kFullCheckpointing;
      }
    }
    decision.keep = keep;
    for (ValueId out : node.outputs) keep_wanted[out] = keep;
    if (op_class == OpClass::kMatmul) matmuls.push_back(decision);
  }

  Plan plan = complete_plan(program, keep_wanted);
  plan.matmuls = std::move(matmuls);
  plan.description = describe(options);
  if (options.mode == AcOptions::Mode::kSelectiveOp) {
    for (size_t p = 0; p < pattern_used.size(); ++p) {
      if (!pattern_used[p]) {
        plan.warnings.push_back("per_op_sac_force_recompute_mm_by_fqns pattern '" +
                                options.force_recompute_fqns[p] +
                                "' matches no matmul in the model");
      }
    }
  }
  return plan;
}

Plan make_inference_plan(const Program& program) {
  Plan plan;
  plan.keep.assign(program.values.size(), false);
  plan.keep[program.loss] = true;
  plan.recompute.assign(program.nodes.size(), false);
  plan.description = "inference";
  return plan;
}

}  // namespace remat
