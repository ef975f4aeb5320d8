#include "train/data_parallel.h"

#include <stdexcept>
#include <string>

#include "core/checksum.h"
#include "core/error.h"
#include "train/load_balance.h"

namespace remat {

void check_data_parallel_degrees(const JobConfig& config, const Communicator& comm) {
  const auto& p = config.parallelism;
  if (p.data_parallel_shard_degree > 1)
    throw InputError(
        "parallelism.data_parallel_shard_degree = " + std::to_string(p.data_parallel_shard_degree) +
        ": sharded (FSDP) training is not built yet (`remat plan` prices it); "
        "expected 1, with parallelism.data_parallel_replicate_degree for data "
        "parallelism");
  if (p.data_parallel_replicate_degree == comm.size()) return;
  const std::string ranks =
      comm.launched_by_mpi()
          ? std::to_string(comm.size()) + " ranks (mpirun -np " + std::to_string(comm.size()) + ")"
          : "1 process (started without mpirun)";
  throw InputError("parallelism.data_parallel_replicate_degree = " +
                   std::to_string(p.data_parallel_replicate_degree) + ", but the run has " + ranks +
                   ": expected the number of ranks; launch with `mpirun -np " +
                   std::to_string(p.data_parallel_replicate_degree) + " remat train ...` or set " +
                   "the degree to " + std::to_string(comm.size()));
}

std::string describe_data_parallel(const JobConfig& config, const Communicator& comm) {
  const int64_t local = config.training.local_batch_size;
  return "data parallel: " + std::to_string(comm.size()) + " ranks (replicate " +
         std::to_string(comm.size()) + "), global batch " + std::to_string(local * comm.size()) +
         " = " + std::to_string(comm.size()) + " x " + std::to_string(local) +
         "; in the log line loss and grad_norm are global, memory is the largest rank's peak, "
         "tps, tflops and mfu are per rank (as torchtitan's), global tps the sum";
}

std::span<const int32_t> DataParallel::local_rows(std::span<const int32_t> global) const {
  const size_t local = global.size() / static_cast<size_t>(ranks());
  return global.subspan(static_cast<size_t>(comm_.rank()) * local, local);
}

double DataParallel::reduce(ModelState& state, double local_loss) {
  Backend& backend = *state.backend;
  // The collectives read and write the tensors' bytes in place.
  if (!backend.host_addressable())
    throw std::logic_error("data parallelism needs a host-addressable backend");
  const auto& params = state.program->params;
  const float mean = 1.0f / static_cast<float>(ranks());
  for (size_t i = 0; i < state.grads.size(); ++i) {
    if (!params[i].trainable) continue;
    Tensor& grad = state.grads[i];
    comm_.allreduce_sum(grad.data(), grad.numel(),
                        "all-reduce of the gradient of " + params[i].fqn);
    backend.scale(grad, mean);
  }
  for (Tensor* counts : expert_counts(state))
    comm_.allreduce_sum(counts->data(), counts->numel(), "all-reduce of the MoE token counts");
  return comm_.sum(local_loss, "all-reduce of the loss") / ranks();
}

void DataParallel::check_replicas(const ModelState& state, const std::string& when) const {
  uint32_t crc = 0;
  for (const Tensor& p : state.params) {
    const HostView host(*state.backend, p);
    crc = crc32c(host.data(), static_cast<uint64_t>(p.bytes()), crc);
  }
  const std::vector<int64_t> all = comm_.all_gather<int64_t>(crc, "all-gather of the checksums");
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw std::logic_error("data parallel: the parameters of rank(s) " + differ +
                           " differ from rank 0's " + when);
}

}  // namespace remat
