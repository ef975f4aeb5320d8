// The early stop of `remat plan --maximize throughput` (planner/throughput.h):
// larger batches stop being calibrated once tokens/s has levelled off.
#include "planner/throughput.h"

#include <gtest/gtest.h>

#include <vector>

namespace remat {
namespace {

// How many candidate batches a search tries over these best tokens/s.
size_t tried(const std::vector<double>& tokens_per_second) {
  ThroughputSaturation saturation;
  for (size_t i = 0; i < tokens_per_second.size(); ++i)
    if (saturation.saturated_after(tokens_per_second[i])) return i + 1;
  return tokens_per_second.size();
}

TEST(ThroughputSaturation, GrowingThroughputIsSearchedToTheEnd) {
  EXPECT_EQ(tried({100, 150, 200, 230, 240, 250, 260}), 7u);
}

TEST(ThroughputSaturation, StopsAfterTwoBatchesWithoutGain) {
  // The best (300) at the fourth batch; the fifth and sixth do not beat it.
  EXPECT_EQ(tried({100, 200, 250, 300, 290, 280, 500}), 6u);
  // Gains within 1% count as none: 300 -> 302 -> 303.
  EXPECT_EQ(tried({100, 300, 302, 303, 900}), 4u);
}

TEST(ThroughputSaturation, AGainBetweenLossesRestartsTheCount) {
  // 310 beats 300 by more than 1%: the count starts again after it.
  EXPECT_EQ(tried({100, 300, 290, 310, 305, 400, 399, 398, 1000}), 8u);
}

TEST(ThroughputSaturation, ABatchOfNoPlanCountsAsNoGain) {
  // 0: no head fitted at that batch (or none was priced).
  EXPECT_EQ(tried({100, 0, 0, 500}), 3u);
}

}  // namespace
}  // namespace remat
