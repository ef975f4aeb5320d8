#include "planner/explain.h"

#include <cstdio>
#include <map>

#include "ac/report.h"

namespace remat {

namespace {

struct Row {
  int kept = 0, rebuilt = 0, live_at_peak = 0;
  int64_t bytes = 0;
  double cost = 0;
};

// Values live during schedule step `at` (after its allocations).
std::vector<bool> live_at(const Program& program, const Schedule& schedule, size_t at) {
  std::vector<bool> live(program.values.size(), false);
  for (size_t s = 0; s <= at && s < schedule.steps.size(); ++s) {
    const Step& step = schedule.steps[s];
    if (step.kind != Step::Kind::kBackward) {
      for (ValueId v : program.nodes[step.node].outputs) live[v] = true;
    }
    if (s == at) break;
    for (ValueId v : step.free_after) live[v] = false;
  }
  return live;
}

}  // namespace

std::string explain_plan(const Program& program, const Plan& plan, const PlannerOptions& planner,
                         const OpCost& cost, const std::string& cost_unit) {
  const std::vector<StepLevels> levels = replay_levels(program, plan, planner);
  size_t peak_step = 0;
  for (size_t s = 0; s < levels.size(); ++s) {
    if (levels[s].peak > levels[peak_step].peak) peak_step = s;
  }
  const Schedule schedule = make_schedule(program, plan, /*with_backward=*/true);
  const std::vector<bool> live = live_at(program, schedule, peak_step);
  const double scale = booking_scale(program, planner);

  // Needed values: saved by a backward, or read by a re-run op.
  std::vector<bool> needed(program.values.size(), false);
  for (size_t n = 0; n < program.nodes.size(); ++n) {
    for (ValueId v : saved_values(program.nodes[n])) needed[v] = true;
    if (plan.recompute[n]) {
      for (ValueId v : program.nodes[n].inputs) needed[v] = true;
    }
  }
  std::map<std::pair<int32_t, std::string>, Row> rows;  // (first node, name) keeps program order
  std::map<std::string, int32_t> first_node;
  for (size_t v = 0; v < program.values.size(); ++v) {
    const int32_t producer = program.values[v].producer;
    const Node& node = program.nodes[producer];
    if (node.block < 0 || !needed[v]) continue;
    const std::string name = generalize_layer_index(program.values[v].name);
    const auto it = first_node.emplace(name, producer).first;
    Row& r = rows[{it->second, name}];
    (plan.keep[v] ? r.kept : r.rebuilt) += 1;
    r.live_at_peak += live[v];
    r.bytes = static_cast<int64_t>(static_cast<double>(program.values[v].bytes()) * scale);
    r.cost = cost(node);
  }
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "  the plan, value by value (peak during %s; cost in %s; price = cost per byte "
                "kept, above which keeping stops paying):\n"
                "  %-44s  %-18s  %12s  %12s  %-14s  %12s\n",
                predict(program, plan, planner).peak_during.c_str(), cost_unit.c_str(), "value",
                "decision", "bytes", "rebuild cost", "live at peak", "price");
  out += line;
  for (const auto& [key, r] : rows) {
    std::string decision =
        r.rebuilt == 0 ? "kept"
        : r.kept == 0  ? "rebuilt"
                      : "kept " + std::to_string(r.kept) + ", rebuilt " + std::to_string(r.rebuilt);
    decision += " x" + std::to_string(r.kept + r.rebuilt);
    std::snprintf(
        line, sizeof line, "  %-44s  %-18s  %12lld  %12.4g  %-14s  %12.4g\n", key.second.c_str(),
        decision.c_str(), static_cast<long long>(r.bytes), r.cost,
        r.live_at_peak == 0 ? "no"
        : r.live_at_peak == r.kept + r.rebuilt
            ? "yes"
            : (std::to_string(r.live_at_peak) + " of " + std::to_string(r.kept + r.rebuilt))
                  .c_str(),
        r.bytes > 0 ? r.cost / static_cast<double>(r.bytes) : 0.0);
    out += line;
  }
  return out;
}

}  // namespace remat
