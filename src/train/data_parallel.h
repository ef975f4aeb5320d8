// Plain data parallelism (parallelism.data_parallel_replicate_degree = N,
// under `mpirun -np N`): every rank holds a full replica of the parameters
// and the AdamW state, trains on its own slice of the global batch, and the
// ranks make the same optimizer step from the same gradients.
//
// Invariants:
//  - the global batch is N x training.local_batch_size windows; rank r reads
//    rows [r * local, (r + 1) * local) of it, the rows a single process with
//    batch N x local would read, so the data of a step is that process's;
//  - after reduce(), every rank holds the same gradients, bit for bit: the
//    rank-ordered sum (dist/comm.h) divided by N, the gradient of the mean
//    loss over the global batch; so every rank computes the same grad_norm,
//    clips the same way and stays an exact replica;
//  - MoE token counts are summed over the ranks, so expert_bias stays equal;
//  - each rank's allocator books exactly what one process at the local batch
//    books (`remat plan` predicts it): the all-reduces' scratch, about twice
//    the gradients in flight, lives in the communicator, outside the books,
//    as MPI's own buffers do.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ac/schedule.h"
#include "dist/comm.h"
#include "io/config.h"
#include "runtime/model_state.h"

namespace remat {

// Whether the run shards (parallelism.data_parallel_shard_degree > 1,
// train/sharded_training.h) rather than replicates.
bool shards(const JobConfig& config);

// InputError unless the configured degrees use exactly the ranks the job
// has (1 without mpirun; replicate x shard under HSDP), or for what sharded
// training does not do yet: bf16, validation, samples, a seed checkpoint.
void check_data_parallel_degrees(const JobConfig& config, const Communicator& comm);

// One line for the start of a run with ranks > 1: the global batch, and
// which figures of the log line are global and which per rank.
std::string describe_data_parallel(const JobConfig& config, const Communicator& comm);

class DataParallel {
 public:
  DataParallel(Communicator& comm, ModelState& state);

  int ranks() const { return comm_.size(); }
  // This rank's rows of a global batch of `global` token ids (row-major,
  // ranks() x local_batch rows).
  std::span<const int32_t> local_rows(std::span<const int32_t> global) const;

  // Called before every schedule step (the executor's step observer): once
  // the backward has left a transformer block, that block's gradients are
  // final and their all-reduces start, so they overlap the backward of the
  // blocks below; every call also drives the all-reduces in flight.
  void on_step(const Step& step);

  // After this rank's backward: starts the all-reduces not started yet (the
  // parameters outside the blocks), sums the MoE token counts, waits for
  // all, divides the gradients by ranks(); returns the global loss (the mean
  // of the ranks' losses, each over as many tokens).
  double reduce(double local_loss);

  // Holds the replicas to the invariant: throws std::logic_error naming the
  // ranks whose parameters (buffers such as expert_bias included) differ
  // from rank 0's, by a CRC-32C of their bytes. `when` goes in the message.
  void check_replicas(const std::string& when) const;

 private:
  void start_block(int32_t block);
  void start(ParamId p);

  Communicator& comm_;
  ModelState& state_;
  std::vector<int32_t> block_of_param_;  // the block whose nodes use it; -1 outside
  std::vector<bool> started_;            // per parameter, this step
  std::vector<std::unique_ptr<CommRequest>> in_flight_;
  int32_t backward_block_ = -1;  // the block the backward is in
};

}  // namespace remat
