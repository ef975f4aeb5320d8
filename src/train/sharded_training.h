// ZeRO-3 / FSDP training (parallelism.data_parallel_shard_degree = N, under
// `mpirun -np N`): the collectives of runtime/sharded_state.h over the
// communicator, and the parts of a step that see the shards: the reduction
// after the backward, the gradient norm, AdamW, and the full state a
// checkpoint is written from.
//
// Invariants:
//  - the data of a step is replicate's (data_parallel.h): rank r trains on
//    rows [r * local, (r + 1) * local) of the global batch;
//  - a gradient shard is the rank-ordered sum of the ranks' full unit
//    gradients (dist/comm.h), divided by N: replicate's bits for the same
//    elements;
//  - grad_norm is the square root of the rank-ordered sum of the shards'
//    squared norms: the same on every rank and in every run, but summed in
//    another order than one process sums its per-parameter norms (within
//    1e-6 relative of replicate's);
//  - MoE token counts are summed over the ranks, so expert_bias, held in
//    full on every rank, stays equal (DataParallel::check_replicas checks it);
//  - the collectives' scratch (the reduce-scatter's receive buffer, a unit's
//    size) lives in the communicator, outside the allocator's books, as
//    MPI's own buffers do.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

#include "dist/comm.h"
#include "runtime/sharded_state.h"
#include "train/optimizer.h"

namespace remat {

class ShardedTraining final : public UnitCollectives {
 public:
  // `state` holds the buffers; `sharded` the shards (its collectives are
  // set to this object).
  ShardedTraining(Communicator& comm, ModelState& state, ShardedState& sharded);

  void start_gather(size_t id, const Tensor& shard, Tensor& gathered) override;
  void wait_gather(size_t id) override;
  void start_reduce_scatter(size_t id, const Tensor& full, Tensor& shard) override;
  void wait_reduce_scatter(size_t id) override;
  void progress() override;

  // After this rank's backward (every reduce-scatter done): sums the MoE
  // token counts, divides the gradient shards by the ranks; returns the
  // global loss (the mean of the ranks' losses).
  double reduce(double local_loss);
  // As clip_grad_norm (optimizer.h), over the shards.
  double clip_grad_norm(double max_norm);
  // One AdamW step of this rank's shards.
  void adamw_step(const AdamWConfig& config, double lr, int64_t step);

  // Every rank: the full parameters (and moments) gathered into `full`
  // (Holds::kEverything, its own allocator), buffers included.
  void gather_full(ModelState& full, bool with_optimizer);
  // The shards (and buffers) from a full state, e.g. a loaded checkpoint.
  void load_full(const ModelState& full, bool with_optimizer);

 private:
  Communicator& comm_;
  ModelState& state_;
  ShardedState& sharded_;
  std::map<size_t, std::unique_ptr<CommRequest>> gathers_, scatters_;
};

}  // namespace remat
