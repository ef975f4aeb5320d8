// A plan: for one program, which values the forward pass keeps for the
// backward pass and which ops the backward pass re-runs. Plans are data; the
// policy (policy.h) makes them, the schedule (schedule.h) orders them, and
// the executor and the planner both follow that schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/program.h"

namespace remat {

// Why a matmul got its decision (the log_mm_flops table prints these).
enum class MatmulReason {
  kNoCheckpointing,          // block not checkpointed: everything kept
  kFullCheckpointing,        // block fully checkpointed: everything recomputed
  kKeptByAlternation,        // op AC: counter odd
  kRecomputedByAlternation,  // op AC: counter even
  kBelowThreshold,           // op AC: 2*m*k*n < selective_op_ac_mm_flops_threshold
  kMatchedFilter,            // op AC: FQN matched per_op_sac_force_recompute_mm_by_fqns
  kOutsideBlocks,            // embedding/output side: never checkpointed
};
const char* to_string(MatmulReason reason);

struct MatmulDecision {
  int32_t node = -1;
  bool keep = false;
  MatmulReason reason = MatmulReason::kNoCheckpointing;
  std::string matched_pattern;  // for kMatchedFilter
};

struct Plan {
  // Per value: the forward pass keeps it until the backward pass no longer
  // needs it. Values neither kept nor rebuilt are freed after their last
  // forward use.
  std::vector<bool> keep;
  // Per node: the backward pass re-runs it (at the start of its block's
  // backward) because a value it produces is needed and was not kept.
  std::vector<bool> recompute;
  // The policy's decision for every matmul node, in program order.
  std::vector<MatmulDecision> matmuls;
  // Human-readable problems found while planning (e.g. a filter pattern that
  // matches no matmul).
  std::vector<std::string> warnings;
  std::string description;  // e.g. "selective op, threshold 0, filter [...]"

  int64_t kept_bytes(const Program& program) const;
  int64_t recompute_flops(const Program& program) const;
  int64_t recomputed_matmuls(const Program& program) const;
};

// Completes a plan from the policy's wish list `keep_wanted` (per value): a
// value is kept only if the backward pass needs it (directly, or to rebuild
// another needed value); every needed value that is not kept is rebuilt by
// re-running its producer, recursively, and nothing else is re-run.
// Values that cross a block boundary are always kept, and so are the
// outputs of ops whose OpInfo says outputs_always_kept (decisions such as MoE
// routing, which a recompute must never re-make).
Plan complete_plan(const Program& program, const std::vector<bool>& keep_wanted);

// Values the backward of node n reads (its saved inputs and outputs).
std::vector<ValueId> saved_values(const Node& node);

}  // namespace remat
