// The ZeRO-3 layout covers every parameter element exactly once across the
// ranks, keeps each block's parameters in one unit, and pads every rank's
// shard to the same length.
#include "runtime/shard_layout.h"

#include <gtest/gtest.h>

#include "models/llama3.h"
#include "models/llama4.h"

namespace remat {
namespace {

TransformerArgs small_args() {
  TransformerArgs args;
  args.dim = 64;
  args.n_layers = 3;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 301;  // odd sizes leave a padded tail
  args.multiple_of = 32;
  return args;
}

void expect_exact_cover(const Program& program, int ranks) {
  const ShardLayout layout = make_shard_layout(program, ranks);
  int64_t total = 0;
  for (const Param& p : program.params) total += numel(p.shape);
  int64_t covered = 0, padded = 0;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const ShardUnit& unit = layout.units[u];
    EXPECT_EQ(unit.chunk, (unit.numel + ranks - 1) / ranks);
    int64_t next = 0;  // the owned ranges tile [0, numel) in rank order
    for (int r = 0; r < ranks; ++r) {
      const auto [begin, end] = layout.owned(u, r);
      EXPECT_EQ(begin, next);
      EXPECT_LE(end - begin, unit.chunk);
      next = end;
    }
    EXPECT_EQ(next, unit.numel);
    covered += unit.numel;
    padded += unit.chunk * ranks;
    for (size_t i = 0; i < unit.params.size(); ++i) {
      const ParamId p = unit.params[i];
      EXPECT_EQ(layout.unit_of_param[p], static_cast<int32_t>(u));
      EXPECT_EQ(layout.offset_of_param[p], unit.offsets[i]);
      const int64_t end = i + 1 < unit.params.size() ? unit.offsets[i + 1] : unit.numel;
      EXPECT_EQ(end - unit.offsets[i], numel(program.params[p].shape));
    }
  }
  EXPECT_EQ(covered, total);
  EXPECT_EQ(layout.shard_elements() * ranks, padded);
  EXPECT_LT(padded - total, static_cast<int64_t>(layout.units.size()) * ranks);
}

TEST(ShardLayout, CoversEveryElementOnceOnAnyRankCount) {
  const Program dense = build_llama3_program(small_args(), 2, 16);
  Llama4Args moe_args;
  moe_args.base = small_args();
  moe_args.base.n_layers = 4;
  moe_args.num_experts = 4;
  moe_args.top_k = 2;
  const Program moe = build_llama4_program(moe_args, 2, 16);
  for (int ranks : {1, 2, 3, 7}) {
    expect_exact_cover(dense, ranks);
    expect_exact_cover(moe, ranks);
  }
}

TEST(ShardLayout, OneUnitPerBlockAfterTheOutsideUnit) {
  const Program program = build_llama3_program(small_args(), 2, 16);
  const ShardLayout layout = make_shard_layout(program, 2);
  ASSERT_EQ(layout.units.size(), 4u);  // outside + 3 blocks
  EXPECT_EQ(layout.units[0].block, -1);
  for (int32_t b = 0; b < 3; ++b) EXPECT_EQ(layout.units[b + 1].block, b);
  for (const Node& node : program.nodes)
    for (ParamId p : node.params)
      EXPECT_EQ(layout.units[layout.unit_of_param[p]].block, node.block) << node.fqn;
}

}  // namespace
}  // namespace remat
