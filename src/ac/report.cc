#include "ac/report.h"

#include <cctype>
#include <cstdio>
#include <map>
#include <vector>

namespace remat {

std::string generalize_layer_index(const std::string& fqn) {
  const std::string prefix = "layers.";
  if (fqn.rfind(prefix, 0) != 0) return fqn;
  size_t end = prefix.size();
  while (end < fqn.size() && std::isdigit(static_cast<unsigned char>(fqn[end]))) ++end;
  if (end == prefix.size()) return fqn;
  return prefix + "*" + fqn.substr(end);
}

std::string format_matmul_table(const Program& program, const Plan& plan, bool with_bytes) {
  struct Row {
    std::string fqn, shape, decision;
    int64_t flops = 0, bytes = 0, count = 0;
  };
  std::vector<Row> rows;
  std::map<std::string, size_t> index;
  int64_t kept = 0, recomputed = 0;
  for (const MatmulDecision& d : plan.matmuls) {
    const Node& node = program.nodes[d.node];
    const OpAttrs& a = node.attrs;
    char shape[128];
    std::snprintf(shape, sizeof shape, "(%lld x %lld) x (%lld x %lld)", static_cast<long long>(a.m),
                  static_cast<long long>(a.k), static_cast<long long>(a.k),
                  static_cast<long long>(a.n));
    std::string decision = to_string(d.reason);
    if (d.reason == MatmulReason::kMatchedFilter) {
      decision = "recomputed (matched filter '" + d.matched_pattern + "')";
    }
    // A matmul the policy keeps whose output no backward reads (e.g. w2, whose
    // output only feeds a residual add) is not stored: the plan says so.
    if (d.keep && !plan.keep[node.outputs[0]]) decision += " [not needed: not stored]";
    // The fused loss head (model.loss_chunk_rows) keeps no logits at all.
    if (op_info(node.kind).backward_recomputes_forward) {
      decision += " [fused with the loss: logits made " + std::to_string(a.chunk) +
                  " rows at a time, rebuilt in the backward]";
    }
    Row row{generalize_layer_index(node.fqn),        shape, decision, forward_flops(node),
            program.values[node.outputs[0]].bytes(), 1};
    const std::string key = row.fqn + "|" + row.shape + "|" + row.decision;
    auto it = index.find(key);
    if (it == index.end()) {
      index[key] = rows.size();
      rows.push_back(row);
    } else {
      ++rows[it->second].count;
    }
    (d.keep ? kept : recomputed) += 1;
  }
  size_t fqn_width = 3, shape_width = 17;
  for (const Row& r : rows) {
    fqn_width = std::max(fqn_width, r.fqn.size());
    shape_width = std::max(shape_width, r.shape.size());
  }
  std::string out = "matmuls (" + std::to_string(plan.matmuls.size()) +
                    " in the model), AC: " + plan.description + "\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-*s  %-*s  %12s  %5s  %s%s\n", static_cast<int>(fqn_width),
                "fqn", static_cast<int>(shape_width), "(m x k) x (k x n)", "FLOPs", "count",
                with_bytes ? "  output bytes  FLOPs/byte  " : "", "decision");
  out += line;
  for (const Row& r : rows) {
    char extra[64] = "";
    if (with_bytes) {
      std::snprintf(extra, sizeof extra, "  %12lld  %10.1f  ", static_cast<long long>(r.bytes),
                    static_cast<double>(r.flops) / static_cast<double>(r.bytes));
    }
    std::snprintf(line, sizeof line, "  %-*s  %-*s  %12.4g  %5lld%s  %s\n",
                  static_cast<int>(fqn_width), r.fqn.c_str(), static_cast<int>(shape_width),
                  r.shape.c_str(), static_cast<double>(r.flops), static_cast<long long>(r.count),
                  with_bytes ? extra : "", r.decision.c_str());
    out += line;
  }
  out += "  kept: " + std::to_string(kept) + ", recomputed: " + std::to_string(recomputed) + "\n";
  return out;
}

}  // namespace remat
