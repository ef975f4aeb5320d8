#include "train/sharded_training.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/load_balance.h"

namespace remat {

namespace {

void wait_for(std::map<size_t, std::unique_ptr<CommRequest>>& requests, size_t id) {
  const auto it = requests.find(id);
  if (it == requests.end())
    throw std::logic_error("sharded training: no collective " + std::to_string(id) + " in flight");
  it->second->wait();
  requests.erase(it);
}

}  // namespace

namespace {

// An HSDP group: the world split by each rank's `color`; none when the shard
// group is the whole world.
std::unique_ptr<Communicator> split_unless_world(Communicator& world, int shard_ranks, int color) {
  return shard_ranks == world.size() ? nullptr : world.split(color);
}

}  // namespace

ShardedTraining::ShardedTraining(Communicator& world, int shard_ranks, ModelState& state,
                                 ShardedState& sharded)
    : world_(world),
      own_group_(split_unless_world(world, shard_ranks, world.rank() / shard_ranks)),
      replicas_(split_unless_world(world, shard_ranks, world.rank() % shard_ranks)),
      group_(own_group_ ? *own_group_ : world),
      state_(state),
      sharded_(sharded) {
  if (group_.size() != shard_ranks || group_.rank() != sharded.rank())
    throw std::logic_error("sharded training: the shard group does not match the layout");
  // The collectives read and write the tensors' bytes in place.
  if (!state.backend->host_addressable())
    throw std::logic_error("sharded training needs a host-addressable backend");
  sharded_.set_collectives(this);
}

void ShardedTraining::start_gather(size_t id, const Tensor& shard, Tensor& gathered) {
  gathers_[id] = group_.start_all_gather(shard.raw(), gathered.raw(), shard.bytes(),
                                         "all-gather of shard unit " + std::to_string(id));
}

void ShardedTraining::wait_gather(size_t id) { wait_for(gathers_, id); }

void ShardedTraining::start_reduce_scatter(size_t id, const Tensor& full, Tensor& shard) {
  float* out = shard.data();
  if (accumulating_) {
    Received& r = received_[id];
    r.sum.resize(static_cast<size_t>(shard.numel()));
    r.shard = &shard;
    out = r.sum.data();
  }
  scatters_[id] = group_.start_reduce_scatter(
      full.data(), out, shard.numel(), "reduce-scatter of gradient unit " + std::to_string(id));
}

void ShardedTraining::wait_reduce_scatter(size_t id) {
  wait_for(scatters_, id);
  const auto it = received_.find(id);
  if (it == received_.end()) return;
  // Elementwise, in index order: the same bits on every rank and run.
  float* shard = it->second.shard->data();
  const std::vector<float>& sum = it->second.sum;
  for (size_t i = 0; i < sum.size(); ++i) shard[i] += sum[i];
  received_.erase(it);
}

void ShardedTraining::scale_gradients(float factor) {
  for (Tensor& g : sharded_.grads) state_.backend->scale(g, factor);
}

void ShardedTraining::progress() {
  for (auto& [id, request] : gathers_) request->poll();
  for (auto& [id, request] : scatters_) request->poll();
}

double ShardedTraining::reduce(double local_loss) {
  if (!gathers_.empty() || !scatters_.empty())
    throw std::logic_error("sharded training: collectives still in flight after the backward");
  std::vector<std::unique_ptr<CommRequest>> sums;
  if (replicas_)
    for (Tensor& g : sharded_.grads)
      sums.push_back(replicas_->start_allreduce_sum(g.data(), g.numel(),
                                                    "all-reduce of a gradient shard's replicas"));
  for (Tensor* counts : expert_counts(state_))
    sums.push_back(world_.start_allreduce_sum(counts->data(), counts->numel(),
                                              "all-reduce of the MoE token counts"));
  for (const auto& request : sums) request->wait();  // in start order, as comm.h asks
  const float mean = 1.0f / static_cast<float>(world_.size());
  for (Tensor& g : sharded_.grads) state_.backend->scale(g, mean);
  return world_.sum(local_loss, "all-reduce of the loss") / world_.size();
}

GradClip ShardedTraining::clip_grad_norm(double max_norm) {
  // Buffers' and padding's gradients are zero: they add nothing. Every
  // shard group holds the same shards (HSDP), so its sum is the norm.
  double sum = 0;
  for (const Tensor& g : sharded_.grads) sum += state_.backend->sum_squares(g);
  return clip_of_norm(std::sqrt(group_.sum(sum, "all-reduce of the squared gradient norm")),
                      max_norm);
}

void ShardedTraining::adamw_step(const AdamWConfig& config, double lr, int64_t step,
                                 float grad_scale) {
  const AdamWStep hyper{static_cast<float>(lr),
                        static_cast<float>(config.beta1),
                        static_cast<float>(config.beta2),
                        static_cast<float>(config.eps),
                        static_cast<float>(config.weight_decay),
                        step,
                        grad_scale};
  // A buffer's range and the padding hold zero parameters with zero
  // gradients, which AdamW leaves zero.
  for (size_t u = 0; u < sharded_.params.size(); ++u)
    state_.backend->adamw_update(sharded_.params[u], sharded_.grads[u], sharded_.exp_avg[u],
                                 sharded_.exp_avg_sq[u], hyper);
}

void ShardedTraining::gather_full(ModelState& full, bool with_optimizer) {
  const ShardLayout& layout = sharded_.layout();
  const auto& program_params = state_.program->params;
  std::vector<std::pair<std::vector<Tensor>*, std::vector<Tensor>*>> kinds = {
      {&sharded_.params, &full.params}};
  if (with_optimizer) {
    full.ensure_optimizer_state();
    kinds.push_back({&sharded_.exp_avg, &full.exp_avg});
    kinds.push_back({&sharded_.exp_avg_sq, &full.exp_avg_sq});
  }
  std::vector<float> flat;
  for (auto [shards, to] : kinds) {
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const ShardUnit& unit = layout.units[u];
      flat.resize(static_cast<size_t>(unit.chunk * layout.ranks));
      const HostView shard(*state_.backend, (*shards)[u]);
      group_
          .start_all_gather(shard.data(), flat.data(), (*shards)[u].bytes(),
                            "all-gather of the state for a save")
          ->wait();
      for (size_t i = 0; i < unit.params.size(); ++i) {
        if (!program_params[unit.params[i]].trainable) continue;
        state_.backend->copy_from_host(flat.data() + unit.offsets[i], (*to)[unit.params[i]]);
      }
    }
  }
  for (size_t p = 0; p < program_params.size(); ++p)
    if (!program_params[p].trainable) state_.backend->copy(state_.params[p], full.params[p]);
}

double ShardedTraining::group_wait_seconds() const {
  return (own_group_ ? own_group_->wait_seconds() : 0) +
         (replicas_ ? replicas_->wait_seconds() : 0);
}

}  // namespace remat
