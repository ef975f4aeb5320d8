#include "train/load_balance.h"

#include <algorithm>
#include <cstdio>
#include <vector>

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
    const Tensor& counts = state.params[counts_id];
    double total = 0, lo = 0, hi = 0;
    for (int64_t e = 0; e < counts.numel(); ++e) total += counts.data()[e];
    if (total <= 0) return;
    for (int64_t e = 0; e < counts.numel(); ++e) {
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
    float* bias = state.params[bias_id].data();
    float* counts = state.params[counts_id].data();
    const int64_t n = state.params[counts_id].numel();
    if (bias == nullptr || n == 0) return;
    float sum = 0;
    for (int64_t e = 0; e < n; ++e) sum += counts[e];
    const float mean = sum / static_cast<float>(n);
    std::vector<float> delta(n);
    float delta_sum = 0;
    for (int64_t e = 0; e < n; ++e) {
      const float diff = mean - counts[e];
      delta[e] = coeff * static_cast<float>((diff > 0) - (diff < 0));
      delta_sum += delta[e];
    }
    const float delta_mean = delta_sum / static_cast<float>(n);
    for (int64_t e = 0; e < n; ++e) {
      bias[e] += delta[e] - delta_mean;
      counts[e] = 0;
    }
  });
}

}  // namespace remat
