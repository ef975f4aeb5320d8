// ZeRO-3 / FSDP training state (parallelism.data_parallel_shard_degree = N):
// each rank holds 1/N of the parameters, gradients and AdamW moments, as flat
// per-unit shards laid out by runtime/shard_layout.h, and gathers a unit's
// parameters only while the schedule computes with them.
//
// When each unit is gathered and scattered is one list of events per
// schedule step, made once from the schedule and run by this class, in a
// training run (with collectives) and in the planner's replay (without: a
// counting-only allocator books the same requests), so the predicted peak is
// the measured one by construction. The events:
//  - the unit outside the blocks (embedding, final norm, output) is gathered
//    before the first step and stays gathered for the whole step (as
//    torchtitan's root FSDP unit); its full gradient exists from the first
//    backward step to the end of the run, then is reduce-scattered;
//  - a block is gathered for each stretch of steps that computes with it:
//    its forward, and its backward with the recompute the schedule runs just
//    before it (one stretch, as FSDP's pre-backward gather serves the
//    checkpointed block's recompute); it is freed when the stretch ends
//    (reshard after forward);
//  - the gather of the next block's stretch starts when a stretch starts
//    (prefetch: at most two blocks gathered at once);
//  - a block's full gradient is allocated when its backward stretch starts;
//    its reduce-scatter starts when the stretch ends and is waited for (and
//    the buffer freed) when the next stretch ends, so it runs while the next
//    block's backward computes. Only what no backward step writes is zeroed
//    (buffers, padding): each parameter's first writer in the schedule
//    overwrites its range (Step::fresh_grad_params).
// Gathered buffers and full gradients are booked as temporaries; the shards
// as parameters, gradients and optimizer state. A buffer's range in the
// flat shards stays zero (the buffers live in ModelState, replicated), and so
// does the padding: AdamW leaves a zero parameter with a zero gradient zero.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/executor.h"
#include "runtime/shard_layout.h"

namespace remat {

// The collectives a sharded step issues; every rank issues the same ones in
// the same order. `id` names a collective until its wait (two gathers of
// one unit may overlap: a block's forward and its prefetched backward).
// Buffers stay untouched until the wait.
class UnitCollectives {
 public:
  virtual ~UnitCollectives() = default;
  // gathered (ranks x chunk floats) <- every rank's shard (chunk), in rank order.
  virtual void start_gather(size_t id, const Tensor& shard, Tensor& gathered) = 0;
  virtual void wait_gather(size_t id) = 0;
  // shard <- the rank-ordered sum of chunk rank() of every rank's `full`.
  virtual void start_reduce_scatter(size_t id, const Tensor& full, Tensor& shard) = 0;
  virtual void wait_reduce_scatter(size_t id) = 0;
  // Drives the collectives in flight without blocking.
  virtual void progress() = 0;
};

class ShardedState final : public ParamSource {
 public:
  // `state` holds the buffers (Holds::kBuffersOnly) and gives the allocator
  // and the backend; `schedule` is the executor's. Allocates the shards.
  ShardedState(ModelState& state, const Schedule& schedule, int ranks, int rank);

  // null: no data moves (the planner's replay on a counting-only allocator).
  void set_collectives(UnitCollectives* collectives) { collectives_ = collectives; }
  const ShardLayout& layout() const { return layout_; }
  int rank() const { return rank_; }

  // This rank's part of ModelState::initialize(seed): every parameter drawn
  // from its own stream, the owned elements kept.
  void initialize(uint64_t seed);
  // This rank's part of a whole state (Holds::kEverything, e.g. a loaded
  // checkpoint): the owned elements of the parameters and moments, and the
  // buffers.
  void load_full(const ModelState& full);

  void before_step(size_t index) override;
  void after_run() override;

  // Per unit, this rank's shard: layout().units[u].chunk floats each.
  std::vector<Tensor> params, grads, exp_avg, exp_avg_sq;

 private:
  struct Event {
    enum class Kind {
      kGather,         // allocate the gathered buffer, start the all-gather
      kUse,            // wait for it; point the unit's parameters into it
      kRelease,        // free the gathered buffer
      kGradients,      // allocate the full gradient, zero its unwritten ranges; point into it
      kReduceScatter,  // start the reduce-scatter of the full gradient
      kFreeGradients,  // wait for it; free the full gradient
    } kind;
    size_t unit;
    size_t slot;  // the buffer: a stretch of steps, or (the last) the outside unit's
  };
  void plan_events(const Schedule& schedule);
  // Per unit, the [first, end) ranges of its full gradient that no step of
  // `schedule` writes: buffers, parameters without a gradient, the padding.
  void find_unwritten(const Schedule& schedule);
  // The owned elements of `from` (per ParamId) into `shards` (per unit).
  void load_owned(const std::vector<Tensor>& from, std::vector<Tensor>& shards);
  void run(const Event& event);
  // Points the unit's parameters (trainable ones: the buffers stay in the
  // model state) or gradients into `buffer`, or at nothing.
  void point(size_t unit, Tensor* buffer, std::vector<float*>& pointers, bool trainable_only);

  ModelState& state_;
  ShardLayout layout_;
  int rank_;
  UnitCollectives* collectives_ = nullptr;
  std::vector<std::vector<Event>> events_;     // before each step; the last: after the run
  std::vector<Tensor> gathered_, full_grads_;  // per slot, while in flight
  std::vector<std::vector<std::pair<int64_t, int64_t>>> unwritten_;  // per unit
};

}  // namespace remat
