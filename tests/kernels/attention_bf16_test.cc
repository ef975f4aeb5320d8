// Attention on bf16 q, k, v and out (kernels/cpu/bf16.h) gives exactly the
// bits of the executor's fp32 staging it replaces: the fp32 kernels run on
// widened copies, out rounded once. Head widths that take the AVX-512 tiles
// (16, 64; where the CPU has them) and the AVX2 ones (24, with a tail of
// the 8x8 transposes); sequences that end in partial tiles; grouped-query
// heads; 1 and 2 threads; a KV-cache forward. The ctest run
// kernels_avx2 repeats them on the AVX2 tiles only.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::bits;
using testing::in;
using testing::narrowed;
using testing::random_vector;
using testing::ThreadsGuard;
using testing::widened;

struct Shape {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

class AttentionBf16 : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionBf16, ForwardAndBackwardAreTheStagedFp32Kernels) {
  const Shape s = GetParam();
  const int64_t q_size = s.batch * s.seq * s.heads * s.head_dim;
  const int64_t kv_size = s.batch * s.seq * s.kv_heads * s.head_dim;
  const int64_t lse_size = s.batch * s.heads * s.seq;
  const std::vector<bf16> q = narrowed(random_vector(q_size, 11, 2.0f));
  const std::vector<bf16> k = narrowed(random_vector(kv_size, 12, 2.0f));
  const std::vector<bf16> v = narrowed(random_vector(kv_size, 13));
  const std::vector<float> dout = random_vector(q_size, 14);
  std::vector<float> workspace(attention_backward_workspace_floats(s.batch, s.seq, s.heads));

  // The staging: widened copies, the fp32 kernels, out rounded once; the
  // backward reads the rounded out widened again, as the executor saved it.
  std::vector<float> out32(q_size), lse32(lse_size);
  attention_forward(widened(q).data(), widened(k).data(), widened(v).data(), s.batch, s.seq,
                    s.heads, s.kv_heads, s.head_dim, out32.data(), lse32.data());
  const std::vector<bf16> out_ref = narrowed(out32);
  for (uint32_t fresh : {0u, 0b111u}) {
    std::vector<float> dq32(q_size, 0.5f), dk32(kv_size, -0.25f), dv32(kv_size, 0.125f);
    attention_backward(dout.data(), widened(q).data(), widened(k).data(), widened(v).data(),
                       widened(out_ref).data(), lse32.data(), s.batch, s.seq, s.heads, s.kv_heads,
                       s.head_dim, dq32.data(), dk32.data(), dv32.data(), workspace.data(), fresh);
    for (int threads : {1, 2}) {
      ThreadsGuard guard(threads);
      std::vector<bf16> out(q_size);
      std::vector<float> lse(lse_size);
      attention_forward_act(in(q), in(k), in(v), s.batch, s.seq, /*past=*/0, s.heads, s.kv_heads,
                            s.head_dim, {out.data(), true}, lse.data());
      EXPECT_EQ(out, out_ref) << "threads " << threads;
      EXPECT_EQ(bits(lse), bits(lse32)) << "threads " << threads;

      // Fresh gradients start from other bytes: the kernel must not read them.
      const float start = fresh != 0 ? 7.0f : 1.0f;
      std::vector<float> dq(q_size, 0.5f * start), dk(kv_size, -0.25f * start),
          dv(kv_size, 0.125f * start);
      attention_backward_act(dout.data(), in(q), in(k), in(v), in(out), lse.data(), s.batch, s.seq,
                             s.heads, s.kv_heads, s.head_dim, dq.data(), dk.data(), dv.data(),
                             workspace.data(), fresh);
      EXPECT_EQ(bits(dq), bits(dq32)) << "threads " << threads << " fresh " << fresh;
      EXPECT_EQ(bits(dk), bits(dk32)) << "threads " << threads << " fresh " << fresh;
      EXPECT_EQ(bits(dv), bits(dv32)) << "threads " << threads << " fresh " << fresh;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AttentionBf16Shapes, AttentionBf16,
                         ::testing::Values(Shape{2, 150, 4, 2, 16},   // AVX-512 tiles, GQA
                                           Shape{1, 200, 3, 3, 24},   // AVX2 tiles, 8x8 tails
                                           Shape{2, 70, 2, 1, 64}));  // wide heads

TEST(AttentionBf16Cached, KvCacheForwardIsTheStagedFp32Kernel) {
  // Queries at positions past .. past + seq - 1 against past + seq keys.
  const int64_t batch = 2, seq = 21, past = 45, heads = 4, kv_heads = 2;
  for (int64_t head_dim : {16, 24}) {
    const int64_t kv_len = past + seq;
    const std::vector<bf16> q = narrowed(random_vector(batch * seq * heads * head_dim, 21, 2.0f));
    const std::vector<bf16> k =
        narrowed(random_vector(batch * kv_len * kv_heads * head_dim, 22, 2.0f));
    const std::vector<bf16> v = narrowed(random_vector(batch * kv_len * kv_heads * head_dim, 23));
    std::vector<float> out32(q.size()), lse32(batch * heads * seq);
    attention_forward_cached(widened(q).data(), widened(k).data(), widened(v).data(), batch, seq,
                             past, heads, kv_heads, head_dim, out32.data(), lse32.data());
    std::vector<bf16> out(q.size());
    std::vector<float> lse(lse32.size());
    attention_forward_act(in(q), in(k), in(v), batch, seq, past, heads, kv_heads, head_dim,
                          {out.data(), true}, lse.data());
    EXPECT_EQ(out, narrowed(out32)) << "head_dim " << head_dim;
    EXPECT_EQ(bits(lse), bits(lse32)) << "head_dim " << head_dim;
  }
}

TEST(AttentionBf16Cached, MixedOperandDtypesAreRejected) {
  const int64_t n = 1 * 8 * 1 * 16;
  const std::vector<bf16> half(n);
  const std::vector<float> full(n);
  std::vector<bf16> out(n);
  std::vector<float> lse(8);
  EXPECT_THROW(attention_forward_act(in(half), {full.data(), false}, in(half), 1, 8, 0, 1, 1, 16,
                                     {out.data(), true}, lse.data()),
               std::invalid_argument);
}

}  // namespace
}  // namespace remat::cpu
