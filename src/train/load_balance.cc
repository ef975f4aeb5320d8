#include "train/load_balance.h"

#include <algorithm>
#include <cstdio>

namespace remat {

namespace {

template <typename Body>
int for_each_router(const Program& program, Body body) {
  int n = 0;
  for (const Node& node : program.nodes) {
    if (node.kind != OpKind::kMoeRoute) continue;
    body(node.params[0], node.params[1]);  // expert_bias, tokens_per_expert
    ++n;
  }
  return n;
}

}  // namespace

MoeLoad moe_load(const ModelState& state) {
  MoeLoad load;
  for_each_router(*state.program, [&](ParamId, ParamId counts_id) {
    // Metrics are host data: the counts are read through a host view.
    const Tensor& tensor = state.params[counts_id];
    const HostView counts(*state.backend, tensor);
    if (counts.data() == nullptr) return;  // counting-only
    double total = 0, lo = 0, hi = 0;
    for (int64_t e = 0; e < tensor.numel(); ++e) total += counts.data()[e];
    if (total <= 0) return;
    for (int64_t e = 0; e < tensor.numel(); ++e) {
      const double share = counts.data()[e] / total;
      lo = e == 0 ? share : std::min(lo, share);
      hi = e == 0 ? share : std::max(hi, share);
    }
    load.min_share = load.layers == 0 ? lo : std::min(load.min_share, lo);
    load.max_share = load.layers == 0 ? hi : std::max(load.max_share, hi);
    ++load.layers;
  });
  return load;
}

std::string format_moe_load(const MoeLoad& load) {
  if (load.layers == 0) return "";
  char text[64];
  std::snprintf(text, sizeof text, "moe: min %.1f%% max %.1f%%", 100.0 * load.min_share,
                100.0 * load.max_share);
  return text;
}

int update_expert_bias(ModelState& state, float coeff) {
  return for_each_router(*state.program, [&](ParamId bias_id, ParamId counts_id) {
    Tensor& bias = state.params[bias_id];
    if (bias.raw() == nullptr) return;  // counting-only
    state.backend->update_expert_bias(bias, state.params[counts_id], coeff);
  });
}

std::vector<Tensor*> expert_counts(ModelState& state) {
  std::vector<Tensor*> counts;
  for_each_router(*state.program,
                  [&](ParamId, ParamId counts_id) { counts.push_back(&state.params[counts_id]); });
  return counts;
}

void reset_expert_counts(ModelState& state) {
  for_each_router(*state.program, [&](ParamId, ParamId counts_id) {
    Tensor& counts = state.params[counts_id];
    if (counts.raw() != nullptr) state.backend->zero(counts);
  });
}

}  // namespace remat
