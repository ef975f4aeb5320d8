#include "ac/knapsack.h"

#include <algorithm>
#include <cstdio>

namespace remat {

Plan make_pytorch_knapsack_plan(const Program& program, double fraction) {
  // The items: what "keep everything" keeps inside blocks, less what every
  // plan must keep anyway.
  const Plan all = complete_plan(program, std::vector<bool>(program.values.size(), true));
  const Plan none_kept = complete_plan(program, [&] {
    std::vector<bool> wanted(program.values.size(), true);
    for (const Node& node : program.nodes) {
      if (node.block < 0) continue;
      for (ValueId v : node.outputs) wanted[v] = false;
    }
    return wanted;
  }());
  struct Item {
    ValueId value;
    int64_t bytes;
    double flops;
  };
  std::vector<Item> items;
  int64_t total = 0;
  for (size_t v = 0; v < program.values.size(); ++v) {
    const Node& producer = program.nodes[program.values[v].producer];
    if (producer.block < 0 || !all.keep[v] || none_kept.keep[v]) continue;
    const int64_t bytes = program.values[v].bytes();
    items.push_back({static_cast<ValueId>(v), bytes, static_cast<double>(forward_flops(producer))});
    total += bytes;
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.flops / static_cast<double>(a.bytes) > b.flops / static_cast<double>(b.bytes);
  });
  const auto capacity = static_cast<int64_t>(fraction * static_cast<double>(total));
  std::vector<bool> wanted(program.values.size(), true);
  for (const Item& item : items) wanted[item.value] = false;
  int64_t used = 0;
  for (const Item& item : items) {
    if (item.flops <= 0 || used + item.bytes > capacity) continue;
    wanted[item.value] = true;
    used += item.bytes;
  }
  Plan plan = complete_plan(program, wanted);
  char buf[160];
  std::snprintf(buf, sizeof buf, "pytorch knapsack %.3g (saves %lld of %lld candidate bytes)",
                fraction, static_cast<long long>(used), static_cast<long long>(total));
  plan.description = buf;
  return plan;
}

}  // namespace remat
