// Decoding with a KV cache (rope_forward_from, attention_forward_cached):
// new queries after cached positions give, bit for bit, the rows that the
// whole sequence in one call gives, however the sequence is cut into calls
// (single positions, chunks crossing key tiles, batches of sequences).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::random_vector;
using testing::ThreadsGuard;

struct Sizes {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

// Copies rows [first, first + n) of each sequence of x ([batch, seq, width]).
std::vector<float> rows(const std::vector<float>& x, const Sizes& s, int64_t width, int64_t first,
                        int64_t n, int64_t seq) {
  std::vector<float> out(static_cast<size_t>(s.batch * n * width));
  for (int64_t b = 0; b < s.batch; ++b) {
    std::memcpy(out.data() + b * n * width, x.data() + (b * seq + first) * width,
                sizeof(float) * n * width);
  }
  return out;
}

void expect_cached_calls_match_one_call(const Sizes& s, const std::vector<int64_t>& cuts) {
  const int64_t qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim;
  const std::vector<float> q = random_vector(s.batch * s.seq * qw, 1);
  const std::vector<float> k = random_vector(s.batch * s.seq * kw, 2);
  const std::vector<float> v = random_vector(s.batch * s.seq * kw, 3);
  std::vector<float> out(q.size()), lse(static_cast<size_t>(s.batch * s.heads * s.seq));
  attention_forward(q.data(), k.data(), v.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim,
                    out.data(), lse.data());
  std::vector<float> rope_all(q.size());
  rope_forward(q.data(), s.batch, s.seq, s.heads, s.head_dim, 500000.0, rope_all.data());

  int64_t past = 0;
  for (const int64_t n : cuts) {
    SCOPED_TRACE("past " + std::to_string(past) + ", " + std::to_string(n) + " new");
    const std::vector<float> qn = rows(q, s, qw, past, n, s.seq);
    // The cache: positions [0, past + n) of k and v.
    const std::vector<float> kc = rows(k, s, kw, 0, past + n, s.seq);
    const std::vector<float> vc = rows(v, s, kw, 0, past + n, s.seq);
    std::vector<float> on(qn.size()), ln(static_cast<size_t>(s.batch * s.heads * n));
    attention_forward_cached(qn.data(), kc.data(), vc.data(), s.batch, n, past, s.heads, s.kv_heads,
                             s.head_dim, on.data(), ln.data());
    EXPECT_EQ(on, rows(out, s, qw, past, n, s.seq));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        for (int64_t r = 0; r < n; ++r) {
          ASSERT_EQ(ln[(b * s.heads + h) * n + r], lse[(b * s.heads + h) * s.seq + past + r]);
        }
      }
    }
    std::vector<float> rn(qn.size());
    rope_forward_from(qn.data(), s.batch, n, past, s.heads, s.head_dim, 500000.0, rn.data());
    EXPECT_EQ(rn, rows(rope_all, s, qw, past, n, s.seq));
    past += n;
  }
  EXPECT_EQ(past, s.seq);
}

TEST(AttentionCached, SinglePositionsAndChunksMatchTheWholeSequence) {
  // 150 positions: three key tiles, the last partial; chunks that start and
  // end inside tiles and one that crosses two tile boundaries.
  std::vector<int64_t> cuts = {37, 1, 1, 1, 70};
  for (int64_t p = 110; p < 150; ++p) cuts.push_back(1);
  expect_cached_calls_match_one_call({1, 150, 4, 2, 16}, cuts);
}

TEST(AttentionCached, BatchesGqaGroupsAndOddHeadDims) {
  expect_cached_calls_match_one_call({2, 70, 4, 1, 12}, {5, 59, 1, 5});
  expect_cached_calls_match_one_call({3, 9, 2, 2, 8}, {1, 1, 7});
}

TEST(AttentionCached, HoldsOnEveryThreadCount) {
  for (int threads : {1, 3}) {
    ThreadsGuard guard(threads);
    expect_cached_calls_match_one_call({1, 130, 8, 2, 16}, {64, 1, 65});
  }
}

TEST(AttentionCached, NegativePastIsRejected) {
  std::vector<float> x(16), o(16), l(2);
  EXPECT_THROW(
      attention_forward_cached(x.data(), x.data(), x.data(), 1, 1, -1, 2, 2, 8, o.data(), l.data()),
      std::invalid_argument);
  EXPECT_THROW(rope_forward_from(x.data(), 1, 1, -1, 2, 8, 500000.0, o.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace remat::cpu
