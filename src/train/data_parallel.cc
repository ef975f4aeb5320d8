#include "train/data_parallel.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/checksum.h"
#include "core/error.h"
#include "planner/job_options.h"
#include "train/load_balance.h"

namespace remat {

namespace {

// InputError for what sharded training does not do yet.
void check_sharded_run(const JobConfig& config) {
  const std::string degree = "parallelism.data_parallel_shard_degree = " +
                             std::to_string(config.parallelism.data_parallel_shard_degree);
  auto refuse = [&](const std::string& what, const std::string& expected) {
    throw InputError(degree + " with " + what +
                     " is not built yet (sharded training runs fp32 training steps only); "
                     "expected " +
                     expected);
  };
  if (config.training.mixed_precision_param != "float32")
    refuse("training.mixed_precision_param = \"" + config.training.mixed_precision_param + "\"",
           "\"float32\"");
  if (config.validation.enabled) refuse("validation.enabled = true", "false");
  if (config.metrics.sample_freq > 0) refuse("metrics.sample_freq > 0", "0");
  if (config.checkpoint.create_seed_checkpoint)
    refuse("checkpoint.create_seed_checkpoint = true",
           "false (create the seed checkpoint in one process, without mpirun)");
}

}  // namespace

bool shards(const JobConfig& config) { return config.parallelism.data_parallel_shard_degree > 1; }

void check_data_parallel_degrees(const JobConfig& config, const Communicator& comm) {
  const auto& p = config.parallelism;
  if (shards(config)) check_sharded_run(config);
  // HSDP: replicate x shard; each degree alone is 1 x N.
  const bool hsdp = shards(config) && p.data_parallel_replicate_degree > 1;
  int64_t degree = 0;
  if (__builtin_mul_overflow(p.data_parallel_shard_degree, p.data_parallel_replicate_degree,
                             &degree))
    degree = INT64_MAX;
  const std::string key =
      hsdp             ? "parallelism.data_parallel_replicate_degree x data_parallel_shard_degree"
      : shards(config) ? "parallelism.data_parallel_shard_degree"
                       : "parallelism.data_parallel_replicate_degree";
  if (degree == comm.size()) {
    gradient_accumulation_steps(config, comm.size());
    return;
  }
  const std::string ranks =
      comm.launched_by_mpi()
          ? std::to_string(comm.size()) + " ranks (mpirun -np " + std::to_string(comm.size()) + ")"
          : "1 process (started without mpirun)";
  throw InputError(key + " = " + std::to_string(degree) + ", but the run has " + ranks +
                   ": expected the number of ranks; launch with `mpirun -np " +
                   std::to_string(degree) + " remat train ...` or set " +
                   (hsdp ? "degrees whose product is " : "the degree to ") +
                   std::to_string(comm.size()));
}

std::string describe_data_parallel(const JobConfig& config, const Communicator& comm) {
  const int64_t local = config.training.local_batch_size;
  const std::string n = std::to_string(comm.size());
  const auto& p = config.parallelism;
  const std::string shard = std::to_string(p.data_parallel_shard_degree);
  const std::string degrees =
      !shards(config) ? "replicate " + n
      : p.data_parallel_replicate_degree == 1
          ? "shard " + n
          : "replicate " + std::to_string(p.data_parallel_replicate_degree) + " x shard " + shard;
  return "data parallel: " + n + " ranks (" + degrees +
         (shards(config) ? ": parameters, gradients and AdamW state 1/" + shard + " per rank"
                         : "") +
         "), global batch " + std::to_string(local * comm.size()) + " = " + n + " x " +
         std::to_string(local) +
         "; in the log line loss and grad_norm are global, memory is the largest rank's peak, "
         "tps, tflops and mfu are per rank (as torchtitan's), global tps the sum";
}

DataParallel::DataParallel(Communicator& comm, ModelState& state)
    : comm_(comm),
      state_(state),
      block_of_param_(state.program->params.size(), -1),
      started_(state.program->params.size(), false) {
  // A parameter that nodes of several blocks share gets gradients until the
  // lowest of them: it is all-reduced after the backward, with those outside
  // the blocks.
  std::vector<bool> seen(block_of_param_.size(), false);
  for (const Node& node : state.program->nodes) {
    for (ParamId p : node.params) {
      block_of_param_[p] = seen[p] && block_of_param_[p] != node.block ? -1 : node.block;
      seen[p] = true;
    }
  }
}

std::span<const int32_t> DataParallel::local_rows(std::span<const int32_t> global) const {
  const size_t local = global.size() / static_cast<size_t>(ranks());
  return global.subspan(static_cast<size_t>(comm_.rank()) * local, local);
}

void DataParallel::start(ParamId p) {
  if (started_[p] || !state_.program->params[p].trainable) return;
  started_[p] = true;
  Tensor& grad = state_.grads[p];
  in_flight_.push_back(comm_.start_allreduce_sum(
      grad.data(), grad.numel(), "all-reduce of the gradient of " + state_.program->params[p].fqn));
}

void DataParallel::start_block(int32_t block) {
  for (size_t p = 0; p < block_of_param_.size(); ++p)
    if (block_of_param_[p] == block) start(static_cast<ParamId>(p));
}

void DataParallel::on_step(const Step& step) {
  for (const auto& request : in_flight_) request->poll();
  if (step.kind == Step::Kind::kForward) return;
  const int32_t block = state_.program->nodes[step.node].block;
  if (block == backward_block_) return;
  // The schedule runs each block's backward (and recompute) in one stretch:
  // a block it left never gets another gradient this step.
  if (block >= 0) {
    for (size_t p = 0; p < block_of_param_.size(); ++p)
      if (block_of_param_[p] == block && started_[p])
        throw std::logic_error("data parallel: the backward returned to block " +
                               std::to_string(block) + " after its all-reduce started");
  }
  if (backward_block_ >= 0) start_block(backward_block_);
  backward_block_ = block;
}

double DataParallel::reduce(double local_loss) {
  Backend& backend = *state_.backend;
  // The collectives read and write the tensors' bytes in place.
  if (!backend.host_addressable())
    throw std::logic_error("data parallelism needs a host-addressable backend");
  for (size_t p = 0; p < started_.size(); ++p) start(static_cast<ParamId>(p));
  for (Tensor* counts : expert_counts(state_))
    in_flight_.push_back(comm_.start_allreduce_sum(counts->data(), counts->numel(),
                                                   "all-reduce of the MoE token counts"));
  for (const auto& request : in_flight_) request->wait();
  in_flight_.clear();
  started_.assign(started_.size(), false);
  backward_block_ = -1;
  const float mean = 1.0f / static_cast<float>(ranks());
  const auto& params = state_.program->params;
  for (size_t i = 0; i < state_.grads.size(); ++i)
    if (params[i].trainable) backend.scale(state_.grads[i], mean);
  return comm_.sum(local_loss, "all-reduce of the loss") / ranks();
}

void DataParallel::check_replicas(const std::string& when) const {
  uint32_t crc = 0;
  for (const Tensor& p : state_.params) {
    const HostView host(*state_.backend, p);
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
