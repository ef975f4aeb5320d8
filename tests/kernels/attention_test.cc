#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::check_gradient;
using testing::max_abs_diff;
using testing::random_vector;
using testing::weighted_sum;

struct Shape {
  int64_t batch, seq, heads, kv_heads, head_dim;
  int64_t q_size() const { return batch * seq * heads * head_dim; }
  int64_t kv_size() const { return batch * seq * kv_heads * head_dim; }
  int64_t lse_size() const { return batch * heads * seq; }
};

// Full-matrix causal GQA attention in double: out, lse and, given dout, the
// gradients (overwritten).
struct NaiveAttention {
  std::vector<double> out, lse, dq, dk, dv;

  NaiveAttention(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>* dout) {
    const int64_t D = s.head_dim, group = s.heads / s.kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    out.assign(s.q_size(), 0.0);
    lse.assign(s.lse_size(), 0.0);
    dq.assign(s.q_size(), 0.0);
    dk.assign(s.kv_size(), 0.0);
    dv.assign(s.kv_size(), 0.0);
    auto qi = [&](int64_t b, int64_t i, int64_t h) { return ((b * s.seq + i) * s.heads + h) * D; };
    auto ki = [&](int64_t b, int64_t j, int64_t g) {
      return ((b * s.seq + j) * s.kv_heads + g) * D;
    };
    std::vector<double> p(s.seq), dp(s.seq);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t g = h / group;
        for (int64_t i = 0; i < s.seq; ++i) {
          double mx = -INFINITY;
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d) dot += double(q[qi(b, i, h) + d]) * k[ki(b, j, g) + d];
            p[j] = dot * scale;
            mx = std::max(mx, p[j]);
          }
          double sum = 0.0;
          for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
          lse[(b * s.heads + h) * s.seq + i] = mx + std::log(sum);
          for (int64_t j = 0; j <= i; ++j) p[j] = std::exp(p[j] - mx) / sum;
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t d = 0; d < D; ++d) out[qi(b, i, h) + d] += p[j] * v[ki(b, j, g) + d];
          if (dout == nullptr) continue;
          const float* go = dout->data() + qi(b, i, h);
          double delta = 0.0;
          for (int64_t j = 0; j <= i; ++j) {
            dp[j] = 0.0;
            for (int64_t d = 0; d < D; ++d) dp[j] += double(go[d]) * v[ki(b, j, g) + d];
            delta += p[j] * dp[j];
          }
          for (int64_t j = 0; j <= i; ++j) {
            const double ds = p[j] * (dp[j] - delta) * scale;
            for (int64_t d = 0; d < D; ++d) {
              dq[qi(b, i, h) + d] += ds * k[ki(b, j, g) + d];
              dk[ki(b, j, g) + d] += ds * q[qi(b, i, h) + d];
              dv[ki(b, j, g) + d] += p[j] * go[d];
            }
          }
        }
      }
  }
};

double max_abs_diff_d(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct AttnResult {
  std::vector<float> out, lse, dq, dk, dv;
};

AttnResult run_attention(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, const std::vector<float>& dout) {
  AttnResult r;
  r.out.assign(s.q_size(), 0.0f);
  r.lse.assign(s.lse_size(), 0.0f);
  attention_forward(q.data(), k.data(), v.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim,
                    r.out.data(), r.lse.data());
  r.dq.assign(s.q_size(), 0.0f);
  r.dk.assign(s.kv_size(), 0.0f);
  r.dv.assign(s.kv_size(), 0.0f);
  std::vector<float> ws(attention_backward_workspace_floats(s.batch, s.seq, s.heads));
  attention_backward(dout.data(), q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), s.batch,
                     s.seq, s.heads, s.kv_heads, s.head_dim, r.dq.data(), r.dk.data(), r.dv.data(),
                     ws.data());
  return r;
}

// Forward and backward against the double-precision full-matrix reference, on
// shapes with several tiles (and several groups of tiles), partial last tiles,
// GQA groups of 1, 2 and 4, and head_dim not a multiple of 8.
TEST(Attention, MatchesNaiveReference) {
  const Shape shapes[] = {{2, 150, 4, 2, 16}, {1, 130, 2, 1, 12}, {1, 64, 3, 3, 8},
                          {2, 5, 2, 2, 64},   {1, 200, 2, 1, 64}, {1, 300, 4, 1, 16},
                          {1, 520, 2, 2, 8}};
  for (const Shape& s : shapes) {
    auto q = random_vector(s.q_size(), 1);
    auto k = random_vector(s.kv_size(), 2);
    auto v = random_vector(s.kv_size(), 3);
    auto dout = random_vector(s.q_size(), 4);
    AttnResult r = run_attention(s, q, k, v, dout);
    NaiveAttention ref(s, q, k, v, &dout);
    SCOPED_TRACE(::testing::Message() << "seq " << s.seq << " head_dim " << s.head_dim);
    EXPECT_LE(max_abs_diff_d(r.out, ref.out), 2e-5);
    EXPECT_LE(max_abs_diff_d(r.lse, ref.lse), 2e-5);
    EXPECT_LE(max_abs_diff_d(r.dq, ref.dq), 5e-5);
    EXPECT_LE(max_abs_diff_d(r.dk, ref.dk), 5e-5);
    EXPECT_LE(max_abs_diff_d(r.dv, ref.dv), 5e-5);
  }
}

// Large scores: the online softmax must stay finite and exact.
TEST(Attention, LargeScoresStayStable) {
  const Shape s{1, 140, 2, 1, 16};
  auto q = random_vector(s.q_size(), 5, 6.0f);
  auto k = random_vector(s.kv_size(), 6, 6.0f);
  auto v = random_vector(s.kv_size(), 7);
  auto dout = random_vector(s.q_size(), 8);
  AttnResult r = run_attention(s, q, k, v, dout);
  NaiveAttention ref(s, q, k, v, &dout);
  EXPECT_LE(max_abs_diff_d(r.out, ref.out), 1e-4);
  EXPECT_LE(max_abs_diff_d(r.lse, ref.lse), 1e-4);
  EXPECT_LE(max_abs_diff_d(r.dv, ref.dv), 1e-4);
}

// Finite differences of L = sum(out * R) w.r.t. every element of q, k and v.
TEST(Attention, GradientsMatchFiniteDifferences) {
  testing::ThreadsGuard one_thread(1);  // thousands of tiny calls
  const Shape s{1, 37, 4, 2, 8};
  auto q = random_vector(s.q_size(), 11);
  auto k = random_vector(s.kv_size(), 12);
  auto v = random_vector(s.kv_size(), 13);
  auto rw = random_vector(s.q_size(), 14);
  AttnResult r = run_attention(s, q, k, v, rw);
  std::vector<float> out(s.q_size()), lse(s.lse_size());
  auto loss = [&] {
    attention_forward(q.data(), k.data(), v.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim,
                      out.data(), lse.data());
    return weighted_sum(out, rw);
  };
  check_gradient("dq", q, r.dq, loss, 1e-2f, 2e-3);
  check_gradient("dk", k, r.dk, loss, 1e-2f, 2e-3);
  check_gradient("dv", v, r.dv, loss, 1e-2f, 2e-3);
}

// Several tiles (seq 150 = 64 + 64 + 22), sampled elements.
TEST(Attention, GradientsMatchFiniteDifferencesAcrossTiles) {
  testing::ThreadsGuard one_thread(1);
  const Shape s{1, 150, 2, 1, 16};
  auto q = random_vector(s.q_size(), 21);
  auto k = random_vector(s.kv_size(), 22);
  auto v = random_vector(s.kv_size(), 23);
  auto rw = random_vector(s.q_size(), 24);
  AttnResult r = run_attention(s, q, k, v, rw);
  std::vector<float> out(s.q_size()), lse(s.lse_size());
  auto loss = [&] {
    attention_forward(q.data(), k.data(), v.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim,
                      out.data(), lse.data());
    return weighted_sum(out, rw);
  };
  check_gradient("dq", q, r.dq, loss, 1e-2f, 2e-3, testing::sample_indices(s.q_size(), 200, 1));
  check_gradient("dk", k, r.dk, loss, 1e-2f, 2e-3, testing::sample_indices(s.kv_size(), 200, 2));
  check_gradient("dv", v, r.dv, loss, 1e-2f, 2e-3, testing::sample_indices(s.kv_size(), 200, 3));
}

TEST(Attention, BackwardAccumulates) {
  const Shape s{2, 70, 4, 2, 16};
  auto q = random_vector(s.q_size(), 31);
  auto k = random_vector(s.kv_size(), 32);
  auto v = random_vector(s.kv_size(), 33);
  auto dout = random_vector(s.q_size(), 34);
  AttnResult once = run_attention(s, q, k, v, dout);
  AttnResult twice = once;
  std::vector<float> ws(attention_backward_workspace_floats(s.batch, s.seq, s.heads));
  attention_backward(dout.data(), q.data(), k.data(), v.data(), once.out.data(), once.lse.data(),
                     s.batch, s.seq, s.heads, s.kv_heads, s.head_dim, twice.dq.data(),
                     twice.dk.data(), twice.dv.data(), ws.data());
  // dk and dv are summed per key tile and added once: exactly doubled. dq
  // receives one addition per key tile, so only up to rounding.
  for (size_t i = 0; i < once.dq.size(); ++i)
    EXPECT_NEAR(twice.dq[i], 2.0f * once.dq[i], 1e-6 * (1.0 + std::fabs(once.dq[i])));
  for (size_t i = 0; i < once.dk.size(); ++i) EXPECT_EQ(twice.dk[i], 2.0f * once.dk[i]);
  for (size_t i = 0; i < once.dv.size(); ++i) EXPECT_EQ(twice.dv[i], 2.0f * once.dv[i]);
}

// Bit-identical across runs and, by construction, across thread counts.
TEST(Attention, DeterministicAcrossRunsAndThreads) {
  const Shape s{2, 200, 4, 2, 16};
  auto q = random_vector(s.q_size(), 41);
  auto k = random_vector(s.kv_size(), 42);
  auto v = random_vector(s.kv_size(), 43);
  auto dout = random_vector(s.q_size(), 44);
  AttnResult a, b, c;
  {
    testing::ThreadsGuard two(2);
    a = run_attention(s, q, k, v, dout);
    b = run_attention(s, q, k, v, dout);
  }
  {
    testing::ThreadsGuard one(1);
    c = run_attention(s, q, k, v, dout);
  }
  for (const AttnResult* r : {&b, &c}) {
    EXPECT_TRUE(testing::bit_identical(a.out, r->out));
    EXPECT_TRUE(testing::bit_identical(a.lse, r->lse));
    EXPECT_TRUE(testing::bit_identical(a.dq, r->dq));
    EXPECT_TRUE(testing::bit_identical(a.dk, r->dk));
    EXPECT_TRUE(testing::bit_identical(a.dv, r->dv));
  }
}

}  // namespace
}  // namespace remat::cpu
