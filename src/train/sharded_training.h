// ZeRO-3 / FSDP training (parallelism.data_parallel_shard_degree = N, under
// `mpirun -np N`; HSDP with data_parallel_replicate_degree = R under
// `mpirun -np R x N`): the collectives of runtime/sharded_state.h over the
// communicator, and the parts of a step that see the shards: the reduction
// after the backward, the gradient norm, AdamW, and the full state a
// checkpoint is written from.
//
// Invariants:
//  - the data of a step is replicate's (data_parallel.h): rank r trains on
//    rows [r * local, (r + 1) * local) of the global batch;
//  - a gradient shard is the rank-ordered sum of the ranks' full unit
//    gradients (dist/comm.h), divided by N: replicate's bits for the same
//    elements; under HSDP (replicate R x shard S = N ranks) the sum of the
//    groups' rank-ordered sums, in group order (within rounding of it);
//  - grad_norm is the square root of the rank-ordered sum of the shards'
//    squared norms: the same on every rank and in every run, but summed in
//    another order than one process sums its per-parameter norms (within
//    1e-6 relative of replicate's);
//  - MoE token counts are summed over the ranks, so expert_bias, held in
//    full on every rank, stays equal (DataParallel::check_replicas checks it);
//  - the collectives' scratch (the reduce-scatter's receive buffer, a unit's
//    size) lives in the communicator, outside the allocator's books, as
//    MPI's own buffers do; so does, under gradient accumulation, the result
//    of a reduce-scatter in flight (a shard's size) that is then added into
//    the shard.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "dist/comm.h"
#include "runtime/sharded_state.h"
#include "train/optimizer.h"

namespace remat {

class ShardedTraining final : public UnitCollectives {
 public:
  // Shards over groups of `shard_ranks` consecutive ranks of `world`
  // (rank r is rank r % shard_ranks of group r / shard_ranks); with more
  // ranks than that (HSDP: replicate x shard), each group holds a replica
  // and the gradient shards are all-reduced across the groups. Splitting
  // the groups is a collective: call it once the inputs are confirmed.
  // `state` holds the buffers; `sharded` the shards (its collectives are
  // set to this object).
  ShardedTraining(Communicator& world, int shard_ranks, ModelState& state, ShardedState& sharded);

  void start_gather(size_t id, const Tensor& shard, Tensor& gathered) override;
  void wait_gather(size_t id) override;
  void start_reduce_scatter(size_t id, const Tensor& full, Tensor& shard) override;
  void wait_reduce_scatter(size_t id) override;
  void progress() override;

  // After this rank's backward (every reduce-scatter done): all-reduces the
  // gradient shards across the replicas (HSDP), sums the MoE token counts,
  // divides the gradient shards by the ranks; returns the global loss (the
  // mean of the ranks' losses).
  double reduce(double local_loss);
  // Gradient accumulation: while set (the later microbatches of a step),
  // each reduce-scatter adds its sum into the gradient shard instead of
  // replacing it; reduce() then sees the microbatches' total.
  void set_accumulating(bool accumulating) { accumulating_ = accumulating; }
  // Multiplies every gradient shard by `factor` (the mean over a step's
  // microbatches, after reduce()).
  void scale_gradients(float factor);
  // As clip_grad_norm (optimizer.h), over the shards.
  GradClip clip_grad_norm(double max_norm);
  // One AdamW step of this rank's shards (on the gradients times grad_scale).
  void adamw_step(const AdamWConfig& config, double lr, int64_t step, float grad_scale);

  // Every rank: the full parameters (and moments) gathered into `full`
  // (Holds::kEverything, its own allocator), buffers included.
  void gather_full(ModelState& full, bool with_optimizer);
  // Seconds this rank blocked in the groups' collectives (HSDP; the world's
  // are Communicator::wait_seconds()).
  double group_wait_seconds() const;

 private:
  Communicator& world_;
  std::unique_ptr<Communicator> own_group_;  // HSDP: this rank's shard group
  std::unique_ptr<Communicator> replicas_;   // HSDP: the ranks holding the same shard
  Communicator& group_;                      // the shard group: own_group_ or the world
  ModelState& state_;
  ShardedState& sharded_;
  std::map<size_t, std::unique_ptr<CommRequest>> gathers_, scatters_;
  // Accumulating reduce-scatters in flight: where each receives, and the
  // shard its result is added to at the wait.
  struct Received {
    std::vector<float> sum;
    Tensor* shard;
  };
  std::map<size_t, Received> received_;
  bool accumulating_ = false;
};

}  // namespace remat
