// The AC policy on a Llama 4 (MoE) block: the router gate is caught by the
// default FQN filter, expert matmuls count in the alternation, and routing
// decisions are kept in every mode, so no recompute ever re-routes.
#include <gtest/gtest.h>

#include <map>

#include "ac/policy.h"
#include "ac/report.h"
#include "models/llama4.h"

namespace remat {
namespace {

Llama4Args small_moe(int64_t top_k = 2) {
  Llama4Args a;
  a.base.dim = 64;
  a.base.n_layers = 4;
  a.base.n_heads = 4;
  a.base.n_kv_heads = 2;
  a.base.vocab_size = 300;
  a.base.multiple_of = 32;
  a.num_experts = 4;
  a.top_k = top_k;
  a.interleave_moe_layer_step = 2;
  return a;
}

AcOptions op_options(std::vector<std::string> filter, double threshold = 0) {
  AcOptions o;
  o.mode = AcOptions::Mode::kSelectiveOp;
  o.force_recompute_fqns = std::move(filter);
  o.mm_flops_threshold = threshold;
  return o;
}

std::map<std::string, MatmulDecision> block_decisions(const Program& p, const Plan& plan,
                                                      int block) {
  std::map<std::string, MatmulDecision> out;
  const std::string prefix = "layers." + std::to_string(block) + ".";
  for (const MatmulDecision& d : plan.matmuls) {
    const std::string& fqn = p.nodes[d.node].fqn;
    if (fqn.rfind(prefix, 0) == 0) out[fqn.substr(prefix.size())] = d;
  }
  return out;
}

TEST(MoePolicy, DefaultFilterRecomputesRouterGateAndExpertsAlternate) {
  Program p = build_llama4_program(small_moe(), 2, 16);
  Plan plan = make_plan(p, op_options({"moe.router.gate"}));
  EXPECT_TRUE(plan.warnings.empty());
  auto d = block_decisions(p, plan, 1);  // block 1 is MoE (interleave 2)
  ASSERT_EQ(d.count("moe.router.gate"), 1u);
  EXPECT_EQ(d.at("moe.router.gate").reason, MatmulReason::kMatchedFilter);
  EXPECT_FALSE(d.at("moe.router.gate").keep);
  // Counted: wq wk wv wo, experts w1 w3 w2, shared w1 w3 w2 -> odd ones kept.
  EXPECT_EQ(d.at("attention.wq").reason, MatmulReason::kKeptByAlternation);
  EXPECT_EQ(d.at("attention.wo").reason, MatmulReason::kRecomputedByAlternation);
  EXPECT_EQ(d.at("moe.experts.w1").reason, MatmulReason::kKeptByAlternation);
  EXPECT_EQ(d.at("moe.experts.w3").reason, MatmulReason::kRecomputedByAlternation);
  EXPECT_EQ(d.at("moe.experts.w2").reason, MatmulReason::kKeptByAlternation);
  EXPECT_EQ(d.at("moe.shared_expert.w1").reason, MatmulReason::kRecomputedByAlternation);
  EXPECT_EQ(d.at("moe.shared_expert.w3").reason, MatmulReason::kKeptByAlternation);
  EXPECT_EQ(d.at("moe.shared_expert.w2").reason, MatmulReason::kRecomputedByAlternation);
  // Without the filter the gate is counted and shifts the alternation.
  auto unfiltered = block_decisions(p, make_plan(p, op_options({})), 1);
  EXPECT_EQ(unfiltered.at("moe.router.gate").reason, MatmulReason::kKeptByAlternation);
  EXPECT_EQ(unfiltered.at("moe.experts.w1").reason, MatmulReason::kRecomputedByAlternation);
}

TEST(MoePolicy, RoutingIsKeptAndNeverRecomputedInEveryMode) {
  Program p = build_llama4_program(small_moe(), 2, 16);
  std::vector<AcOptions> modes(5);
  modes[0].mode = AcOptions::Mode::kNone;
  modes[1].mode = AcOptions::Mode::kFull;
  modes[2].mode = AcOptions::Mode::kSelectiveLayer;
  modes[2].layer_frequency = 1;
  modes[3] = op_options({"moe.router.gate"});
  modes[4] = op_options({}, 1e50);
  int routers = 0;
  for (const AcOptions& o : modes) {
    Plan plan = make_plan(p, o);
    for (size_t n = 0; n < p.nodes.size(); ++n) {
      const Node& node = p.nodes[n];
      if (!op_info(node.kind).outputs_always_kept) continue;
      ++routers;
      EXPECT_FALSE(plan.recompute[n]) << describe(o) << " " << node.fqn;
      for (ValueId out : node.outputs) {
        EXPECT_TRUE(plan.keep[out]) << describe(o) << " " << p.values[out].name;
      }
    }
  }
  EXPECT_EQ(routers, 5 * 2);
}

TEST(MoePolicy, RouterGateIsTheLowFlopMatmulAt17bx16e) {
  JobConfig::Model m;
  m.name = "llama4";
  m.flavor = "17bx16e";
  Program p = build_llama4_program(resolve_llama4_args(m), 1, 8192);
  int64_t gate = 0, smallest_other = INT64_MAX;
  for (const Node& n : p.nodes) {
    if (n.block != 0 || op_info(n.kind).op_class != OpClass::kMatmul) continue;
    if (n.fqn == "layers.0.moe.router.gate") {
      gate = forward_flops(n);
    } else {
      smallest_other = std::min(smallest_other, forward_flops(n));
    }
  }
  EXPECT_EQ(gate, 2LL * 8192 * 5120 * 16);
  EXPECT_LT(gate, smallest_other / 50);
  const std::string table = format_matmul_table(p, make_plan(p, op_options({"moe.router.gate"})));
  EXPECT_NE(table.find("layers.*.moe.router.gate       (8192 x 5120) x (5120 x 16)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("recomputed (matched filter 'moe.router.gate')"), std::string::npos);
}

}  // namespace
}  // namespace remat
