#include "runtime/sharded_state.h"

#include <algorithm>
#include <optional>

namespace remat {

namespace {

// A maximal run of schedule steps under one gather key (executor.h).
struct Stretch {
  size_t first = 0;
  int32_t key = 0;
  std::optional<size_t> unit;  // a block's unit; none outside the blocks
  bool backward = false;
};

std::vector<Stretch> stretches_of(const Program& program, const Schedule& schedule,
                                  const ShardLayout& layout) {
  std::vector<std::optional<size_t>> unit_of_block(static_cast<size_t>(program.n_blocks));
  for (size_t u = 0; u < layout.units.size(); ++u)
    if (layout.units[u].block >= 0) unit_of_block[layout.units[u].block] = u;
  std::vector<Stretch> stretches;
  for (size_t i = 0; i < schedule.steps.size(); ++i) {
    const int32_t key = gather_unit(program, schedule.steps[i]);
    if (!stretches.empty() && stretches.back().key == key) continue;
    const int32_t block = program.nodes[schedule.steps[i].node].block;
    Stretch s{i, key, std::nullopt, key != block};
    if (block >= 0) s.unit = unit_of_block[block];
    stretches.push_back(s);
  }
  return stretches;
}

}  // namespace

ShardedState::ShardedState(ModelState& state, const Schedule& schedule, int ranks, int rank)
    : state_(state), layout_(make_shard_layout(*state.program, ranks)), rank_(rank) {
  Allocator& allocator = *state.allocator;
  const std::pair<std::vector<Tensor>*, MemoryCategory> kinds[] = {
      {&params, MemoryCategory::kParameters},
      {&grads, MemoryCategory::kGradients},
      {&exp_avg, MemoryCategory::kOptimizerState},
      {&exp_avg_sq, MemoryCategory::kOptimizerState}};
  for (auto [tensors, category] : kinds) {
    for (const ShardUnit& unit : layout_.units) {
      tensors->emplace_back(allocator, Shape{unit.chunk}, category);
      state.backend->zero(tensors->back());
    }
  }
  const auto& program_params = state.program->params;
  ParamSource::params.assign(program_params.size(), nullptr);
  ParamSource::grads.assign(program_params.size(), nullptr);
  for (size_t p = 0; p < program_params.size(); ++p)
    if (!program_params[p].trainable) ParamSource::params[p] = state.params[p].data();
  plan_events(schedule);
  find_unwritten(schedule);
}

void ShardedState::find_unwritten(const Schedule& schedule) {
  const Program& program = *state_.program;
  std::vector<bool> written(program.params.size(), false);
  for (const Step& step : schedule.steps) {
    const std::vector<ParamId>& params = program.nodes[step.node].params;
    for (size_t i = 0; i < params.size(); ++i)
      if (((step.fresh_grad_params >> i) & 1) != 0) written[params[i]] = true;
  }
  unwritten_.assign(layout_.units.size(), {});
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const ShardUnit& unit = layout_.units[u];
    auto& ranges = unwritten_[u];
    auto add = [&](int64_t first, int64_t end) {
      if (first == end) return;
      if (!ranges.empty() && ranges.back().second == first)
        ranges.back().second = end;
      else
        ranges.emplace_back(first, end);
    };
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const ParamId p = unit.params[i];
      if (!written[p]) add(unit.offsets[i], unit.offsets[i] + numel(program.params[p].shape));
    }
    add(unit.numel, unit.chunk * layout_.ranks);
  }
}

void ShardedState::plan_events(const Schedule& schedule) {
  using Kind = Event::Kind;
  const size_t n = schedule.steps.size();
  const std::vector<Stretch> stretches = stretches_of(*state_.program, schedule, layout_);
  const size_t outside_slot = stretches.size();
  gathered_.resize(outside_slot + 1);
  full_grads_.resize(outside_slot + 1);
  events_.assign(n + 1, {});
  std::optional<size_t> outside;
  if (!layout_.units.empty() && layout_.units[0].block < 0) outside = 0;
  if (outside) {
    events_[0].push_back({Kind::kGather, *outside, outside_slot});
    events_[0].push_back({Kind::kUse, *outside, outside_slot});
  }
  std::vector<bool> issued(stretches.size(), false);
  for (size_t j = 0; j <= stretches.size(); ++j) {
    std::vector<Event>& at = events_[j < stretches.size() ? stretches[j].first : n];
    // The stretch that ends here, and the reduce-scatter that ran during it.
    if (j >= 1 && stretches[j - 1].unit) {
      at.push_back({Kind::kRelease, *stretches[j - 1].unit, j - 1});
      if (stretches[j - 1].backward)
        at.push_back({Kind::kReduceScatter, *stretches[j - 1].unit, j - 1});
    }
    if (j >= 2 && stretches[j - 2].unit && stretches[j - 2].backward)
      at.push_back({Kind::kFreeGradients, *stretches[j - 2].unit, j - 2});
    if (j == stretches.size()) break;
    if (const Stretch& s = stretches[j]; s.unit) {
      if (!issued[j]) at.push_back({Kind::kGather, *s.unit, j});
      issued[j] = true;
      at.push_back({Kind::kUse, *s.unit, j});
      if (s.backward) at.push_back({Kind::kGradients, *s.unit, j});
    }
    // Prefetch: the next block's gather runs while this stretch computes.
    for (size_t k = j + 1; k < stretches.size(); ++k) {
      if (!stretches[k].unit) continue;
      if (!issued[k]) at.push_back({Kind::kGather, *stretches[k].unit, k});
      issued[k] = true;
      break;
    }
  }
  if (!stretches.empty() && stretches.back().unit && stretches.back().backward)
    events_[n].push_back({Kind::kFreeGradients, *stretches.back().unit, stretches.size() - 1});
  if (!outside) return;
  // The outside unit's gradient, from the first backward step to the end.
  const auto first_backward =
      std::find_if(schedule.steps.begin(), schedule.steps.end(),
                   [](const Step& step) { return step.kind != Step::Kind::kForward; });
  if (first_backward != schedule.steps.end()) {
    events_[first_backward - schedule.steps.begin()].push_back(
        {Kind::kGradients, *outside, outside_slot});
    events_[n].push_back({Kind::kReduceScatter, *outside, outside_slot});
    events_[n].push_back({Kind::kFreeGradients, *outside, outside_slot});
  }
  events_[n].push_back({Kind::kRelease, *outside, outside_slot});
}

void ShardedState::point(size_t unit, Tensor* buffer, std::vector<float*>& pointers,
                         bool trainable_only) {
  const ShardUnit& u = layout_.units[unit];
  const auto& program_params = state_.program->params;
  for (size_t i = 0; i < u.params.size(); ++i) {
    const ParamId p = u.params[i];
    if (trainable_only && !program_params[p].trainable) continue;
    // Counting-only buffers have no bytes to point into.
    pointers[p] = buffer && buffer->data() ? buffer->data() + u.offsets[i] : nullptr;
  }
}

void ShardedState::run(const Event& e) {
  using Kind = Event::Kind;
  const int64_t gathered_numel = layout_.units[e.unit].chunk * layout_.ranks;
  switch (e.kind) {
    case Kind::kGather:
      gathered_[e.slot] =
          Tensor(*state_.allocator, Shape{gathered_numel}, MemoryCategory::kTemporaries);
      if (collectives_) collectives_->start_gather(e.slot, params[e.unit], gathered_[e.slot]);
      break;
    case Kind::kUse:
      if (collectives_) collectives_->wait_gather(e.slot);
      point(e.unit, &gathered_[e.slot], ParamSource::params, true);
      break;
    case Kind::kRelease:
      point(e.unit, nullptr, ParamSource::params, true);
      gathered_[e.slot].reset();
      break;
    case Kind::kGradients:
      full_grads_[e.slot] =
          Tensor(*state_.allocator, Shape{gathered_numel}, MemoryCategory::kTemporaries);
      for (auto [first, end] : unwritten_[e.unit])
        state_.backend->zero_range(full_grads_[e.slot], first, end - first);
      point(e.unit, &full_grads_[e.slot], ParamSource::grads, false);
      break;
    case Kind::kReduceScatter:
      point(e.unit, nullptr, ParamSource::grads, false);
      if (collectives_)
        collectives_->start_reduce_scatter(e.slot, full_grads_[e.slot], grads[e.unit]);
      break;
    case Kind::kFreeGradients:
      if (collectives_) collectives_->wait_reduce_scatter(e.slot);
      full_grads_[e.slot].reset();
      break;
  }
}

void ShardedState::before_step(size_t index) {
  if (collectives_) collectives_->progress();
  for (const Event& e : events_.at(index)) run(e);
}

void ShardedState::after_run() {
  for (const Event& e : events_.back()) run(e);
}

void ShardedState::initialize(uint64_t seed) {
  const auto& program_params = state_.program->params;
  std::vector<float> flat;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const ShardUnit& unit = layout_.units[u];
    flat.assign(static_cast<size_t>(unit.numel), 0.0f);
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const Param& p = program_params[unit.params[i]];
      if (p.trainable) draw_initial_values(p, seed, flat.data() + unit.offsets[i], numel(p.shape));
    }
    const auto [begin, end] = layout_.owned(u, rank_);
    write_from_host(*state_.backend, params[u], [&](float* host) {
      std::fill(host, host + unit.chunk, 0.0f);
      std::copy(flat.begin() + begin, flat.begin() + end, host);
    });
  }
}

void ShardedState::load_full(const ModelState& full) {
  load_owned(full.params, params);
  if (!full.exp_avg.empty()) {
    load_owned(full.exp_avg, exp_avg);
    load_owned(full.exp_avg_sq, exp_avg_sq);
  }
  const auto& program_params = state_.program->params;
  for (size_t p = 0; p < program_params.size(); ++p)
    if (!program_params[p].trainable) state_.backend->copy(full.params[p], state_.params[p]);
}

void ShardedState::load_owned(const std::vector<Tensor>& from, std::vector<Tensor>& shards) {
  const auto& program_params = state_.program->params;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const ShardUnit& unit = layout_.units[u];
    const auto [begin, end] = layout_.owned(u, rank_);
    write_from_host(*state_.backend, shards[u], [&](float* host) {
      std::fill(host, host + unit.chunk, 0.0f);
      for (size_t i = 0; i < unit.params.size(); ++i) {
        const ParamId p = unit.params[i];
        if (!program_params[p].trainable) continue;
        const int64_t first = std::max(begin, unit.offsets[i]);
        const int64_t last = std::min(end, unit.offsets[i] + from[p].numel());
        if (first >= last) continue;
        const HostView source(*state_.backend, from[p]);
        std::copy(source.data() + (first - unit.offsets[i]),
                  source.data() + (last - unit.offsets[i]), host + (first - begin));
      }
    });
  }
}

}  // namespace remat
