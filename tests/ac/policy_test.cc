// The AC policy's decisions on a Llama 3 block, as spec.md §2 states them.
#include "ac/policy.h"

#include <gtest/gtest.h>

#include <map>

#include "ac/report.h"
#include "models/llama3.h"

namespace remat {
namespace {

// A GQA model: wk and wv are the smallest matmuls of a block.
Program gqa_program(int64_t layers = 3) {
  TransformerArgs args;
  args.dim = 64;
  args.n_layers = layers;
  args.n_heads = 4;
  args.n_kv_heads = 1;
  args.vocab_size = 300;
  args.multiple_of = 32;
  return build_llama3_program(args, 2, 16);
}

// block -> (matmul name within the block -> decision)
std::map<std::string, MatmulDecision> decisions_of_block(const Program& p, const Plan& plan,
                                                         int block) {
  std::map<std::string, MatmulDecision> out;
  const std::string prefix = "layers." + std::to_string(block) + ".";
  for (const MatmulDecision& d : plan.matmuls) {
    const std::string& fqn = p.nodes[d.node].fqn;
    if (fqn.rfind(prefix, 0) == 0) out[fqn.substr(prefix.size())] = d;
  }
  return out;
}

std::vector<std::string> kept_names(const std::map<std::string, MatmulDecision>& d) {
  std::vector<std::string> kept;
  for (const char* name : {"attention.wq", "attention.wk", "attention.wv", "attention.wo",
                           "feed_forward.w1", "feed_forward.w3", "feed_forward.w2"}) {
    if (d.at(name).keep) kept.push_back(name);
  }
  return kept;
}

AcOptions op_options(double threshold = 0, std::vector<std::string> filter = {}) {
  AcOptions o;
  o.mode = AcOptions::Mode::kSelectiveOp;
  o.mm_flops_threshold = threshold;
  o.force_recompute_fqns = std::move(filter);
  return o;
}

TEST(OpPolicy, KeepsEveryOtherMatmulInEveryBlock) {
  Program p = gqa_program();
  Plan plan = make_plan(p, op_options());
  for (int block = 0; block < 3; ++block) {
    auto d = decisions_of_block(p, plan, block);
    EXPECT_EQ(kept_names(d), (std::vector<std::string>{"attention.wq", "attention.wv",
                                                       "feed_forward.w1", "feed_forward.w2"}));
    EXPECT_EQ(d.at("attention.wk").reason, MatmulReason::kRecomputedByAlternation);
    EXPECT_EQ(d.at("attention.wq").reason, MatmulReason::kKeptByAlternation);
  }
}

TEST(OpPolicy, ThresholdBetweenSmallestMatmulsShiftsTheAlternation) {
  Program p = gqa_program();
  // wk and wv (GQA: n = kv_heads * head_dim = 16) are the smallest matmuls.
  int64_t wk_flops = 0, wq_flops = 0;
  for (const Node& n : p.nodes) {
    if (n.fqn == "layers.0.attention.wk") wk_flops = forward_flops(n);
    if (n.fqn == "layers.0.attention.wq") wq_flops = forward_flops(n);
  }
  ASSERT_LT(wk_flops, wq_flops);
  Plan plan = make_plan(p, op_options(static_cast<double>(wk_flops) + 1));
  auto d = decisions_of_block(p, plan, 1);
  EXPECT_EQ(d.at("attention.wk").reason, MatmulReason::kBelowThreshold);
  EXPECT_EQ(d.at("attention.wv").reason, MatmulReason::kBelowThreshold);
  // The alternation runs over wq, wo, w1, w3, w2 and keeps wq, w1, w2.
  EXPECT_EQ(kept_names(d),
            (std::vector<std::string>{"attention.wq", "feed_forward.w1", "feed_forward.w2"}));
  EXPECT_EQ(d.at("attention.wo").reason, MatmulReason::kRecomputedByAlternation);
  EXPECT_EQ(d.at("feed_forward.w3").reason, MatmulReason::kRecomputedByAlternation);
}

TEST(OpPolicy, ExtremeThresholds) {
  Program p = gqa_program();
  Plan zero = make_plan(p, op_options(0));
  Plan huge = make_plan(p, op_options(1e50));
  for (const MatmulDecision& d : huge.matmuls) {
    if (p.nodes[d.node].block >= 0) {
      EXPECT_FALSE(d.keep);
      EXPECT_EQ(d.reason, MatmulReason::kBelowThreshold);
    }
  }
  size_t kept = 0;
  for (const MatmulDecision& d : zero.matmuls) kept += d.keep && p.nodes[d.node].block >= 0;
  EXPECT_EQ(kept, 4u * 3u);
}

TEST(OpPolicy, FilterRecomputesWithoutCounting) {
  Program p = gqa_program();
  Plan plan = make_plan(p, op_options(0, {"attention.wo"}));
  auto d = decisions_of_block(p, plan, 2);
  EXPECT_EQ(d.at("attention.wo").reason, MatmulReason::kMatchedFilter);
  EXPECT_EQ(d.at("attention.wo").matched_pattern, "attention.wo");
  // wq, wk, wv, w1, w3, w2 alternate: keep wq, wv, w3.
  EXPECT_EQ(kept_names(d),
            (std::vector<std::string>{"attention.wq", "attention.wv", "feed_forward.w3"}));
  EXPECT_TRUE(plan.warnings.empty());
}

TEST(OpPolicy, FilterMatchesFqnNotShape) {
  // wq and wo have the same shape (64 x 64); torchtitan's shape match would
  // catch both. remat matches the FQN only.
  Program p = gqa_program();
  Plan plan = make_plan(p, op_options(0, {"layers.1.attention.wo"}));
  EXPECT_EQ(decisions_of_block(p, plan, 1).at("attention.wq").reason,
            MatmulReason::kKeptByAlternation);
  EXPECT_EQ(decisions_of_block(p, plan, 1).at("attention.wo").reason, MatmulReason::kMatchedFilter);
  EXPECT_EQ(decisions_of_block(p, plan, 0).at("attention.wo").reason,
            MatmulReason::kRecomputedByAlternation);
}

TEST(OpPolicy, WildcardPatternsAndUnmatchedWarning) {
  EXPECT_TRUE(fqn_matches("layers.3.attention.wq", "attention.wq"));
  EXPECT_TRUE(fqn_matches("layers.3.attention.wq", "layers.*.wq"));
  EXPECT_TRUE(fqn_matches("layers.1.moe.router.gate", "moe.router.gate"));
  EXPECT_FALSE(fqn_matches("layers.3.attention.wq", "attention.wk"));
  EXPECT_FALSE(fqn_matches("layers.3.attention.wq", "layers.*.w1"));
  Program p = gqa_program();
  Plan plan = make_plan(p, op_options(0, {"moe.router.gate", "feed_forward.*"}));
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("moe.router.gate"), std::string::npos);
}

TEST(LayerPolicy, CheckpointsBlocksWhoseCountIsDivisibleByN) {
  Program p = gqa_program(6);
  auto checkpointed_blocks = [&](int64_t n) {
    AcOptions o;
    o.mode = AcOptions::Mode::kSelectiveLayer;
    o.layer_frequency = n;
    Plan plan = make_plan(p, o);
    std::vector<int> blocks;
    for (int b = 0; b < 6; ++b) {
      if (!decisions_of_block(p, plan, b).at("attention.wq").keep) blocks.push_back(b);
    }
    return blocks;
  };
  // Blocks are counted 1..6: N = 2 checkpoints counts 2, 4, 6 (indices 1, 3, 5).
  EXPECT_EQ(checkpointed_blocks(2), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(checkpointed_blocks(3), (std::vector<int>{2, 5}));
  EXPECT_EQ(checkpointed_blocks(1), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(checkpointed_blocks(0), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Plan, FullKeepsOnlyBlockInputsInsideBlocks) {
  Program p = gqa_program();
  AcOptions full;
  full.mode = AcOptions::Mode::kFull;
  Plan plan = make_plan(p, full);
  for (size_t v = 0; v < p.values.size(); ++v) {
    const Node& producer = p.nodes[p.values[v].producer];
    if (!plan.keep[v] || producer.block < 0) continue;
    // A kept value produced inside a block must be that block's output.
    bool read_outside = false;
    for (int32_t c : p.consumers(static_cast<ValueId>(v))) {
      read_outside = read_outside || p.nodes[c].block != producer.block;
    }
    EXPECT_TRUE(read_outside) << p.values[v].name;
  }
}

TEST(Plan, NoneRecomputesNothingAndOrderingOfKeptBytes) {
  Program p = gqa_program();
  AcOptions none;
  none.mode = AcOptions::Mode::kNone;
  AcOptions full;
  full.mode = AcOptions::Mode::kFull;
  Plan pn = make_plan(p, none), pf = make_plan(p, full), p0 = make_plan(p, op_options(0)),
       p50 = make_plan(p, op_options(1e50));
  EXPECT_EQ(pn.recompute_flops(p), 0);
  EXPECT_GE(pn.kept_bytes(p), p0.kept_bytes(p));
  EXPECT_GE(p0.kept_bytes(p), p50.kept_bytes(p));
  EXPECT_GE(p50.kept_bytes(p), pf.kept_bytes(p));
  EXPECT_LE(p0.recompute_flops(p), p50.recompute_flops(p));
  EXPECT_LE(p50.recompute_flops(p), pf.recompute_flops(p));
}

TEST(Plan, RecomputeIsMinimal) {
  // Under op AC the attention core is kept, and nothing downstream of a kept
  // value needs the wq projection again... but wq's input (the norm) is
  // needed by its own backward, so attention_norm is re-run; the attention
  // core itself is never re-run, and neither is w2 (its output only feeds the
  // residual add, whose backward reads nothing).
  Program p = gqa_program();
  Plan plan = make_plan(p, op_options(0));
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    const std::string& fqn = p.nodes[n].fqn;
    if (fqn.find("attention.sdpa") != std::string::npos ||
        fqn.find("feed_forward.w2") != std::string::npos ||
        fqn.find("attention.wq") != std::string::npos ||
        fqn.find("ffn_residual") != std::string::npos) {
      EXPECT_FALSE(plan.recompute[n]) << fqn;
    }
    if (fqn.find("attention_norm") != std::string::npos ||
        fqn.find("attention.wk") != std::string::npos) {
      EXPECT_TRUE(plan.recompute[n]) << fqn;
    }
  }
}

TEST(Report, MatmulTableNamesEveryDecision) {
  Program p = gqa_program();
  Plan plan = make_plan(p, op_options(0, {"attention.wo"}));
  const std::string table = format_matmul_table(p, plan);
  EXPECT_NE(table.find("layers.*.attention.wq"), std::string::npos);
  EXPECT_NE(table.find("(32 x 64) x (64 x 64)"), std::string::npos);
  EXPECT_NE(table.find("matched filter 'attention.wo'"), std::string::npos);
  EXPECT_NE(table.find("alternation: odd"), std::string::npos);
  EXPECT_EQ(generalize_layer_index("layers.12.attention.wq"), "layers.*.attention.wq");
}

}  // namespace
}  // namespace remat
