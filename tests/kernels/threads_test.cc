// Every kernel gives bit-identical results for any thread count (1, 2, 3,
// 4), so a run resumed on another machine continues exactly. Shapes are
// chosen so work splits unevenly (row counts not divisible by 2 or 3) and
// large enough that the kernels do go parallel.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kernels.h"
#include "test_util.h"

namespace remat::cpu {
namespace {

using testing::bit_identical;
using testing::random_vector;
using testing::ThreadsGuard;

// Runs `f` (which fills its outputs) at 1 thread and at 2, 3 and 4; every
// output must match the 1-thread result bit for bit.
void expect_thread_independent(const char* name,
                               const std::function<std::vector<std::vector<float>>()>& f) {
  std::vector<std::vector<float>> reference;
  {
    ThreadsGuard one(1);
    reference = f();
  }
  for (int threads : {2, 3, 4}) {
    ThreadsGuard guard(threads);
    const std::vector<std::vector<float>> got = f();
    ASSERT_EQ(got.size(), reference.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(bit_identical(got[i], reference[i]))
          << name << ": output " << i << " differs at " << threads << " threads";
  }
}

TEST(ThreadCount, LinearLayersInBothWeightLayouts) {
  for (int64_t m : {1, 7, 100, 257, 1000}) {
    const int64_t k = 96, n = 200;
    const auto x = random_vector(m * k, 1), w = random_vector(n * k, 2),
               dy = random_vector(m * n, 3);
    expect_thread_independent("linear", [&] {
      std::vector<float> y(m * n), dx(m * k, 0.5f), dw(n * k, 0.25f);
      linear_forward(x.data(), w.data(), m, k, n, y.data());
      linear_backward(dy.data(), x.data(), w.data(), m, k, n, dx.data(), dw.data());
      return std::vector<std::vector<float>>{y, dx, dw};
    });
    expect_thread_independent("linear_in_out", [&] {
      std::vector<float> y(m * n), dx(m * k, 0.5f), dw(k * n, 0.25f);
      linear_in_out_forward(x.data(), w.data(), m, k, n, y.data());
      linear_in_out_backward(dy.data(), x.data(), w.data(), m, k, n, dx.data(), dw.data());
      return std::vector<std::vector<float>>{y, dx, dw};
    });
  }
}

TEST(ThreadCount, MixtureOfExpertsPath) {
  const int64_t tokens = 301, dim = 64, experts = 8, top_k = 2, hidden = 96;
  const auto logits = random_vector(tokens * experts, 4);
  const auto bias = random_vector(experts, 5, 0.01f);
  const auto x = random_vector(tokens * dim, 6);
  const auto w1 = random_vector(experts * dim * hidden, 7, 0.1f);
  const auto dy = random_vector(tokens * hidden, 8);
  expect_thread_independent("moe", [&] {
    std::vector<float> scores(tokens * top_k), indices(tokens * top_k), counts(experts, 0.0f);
    moe_route_forward(logits.data(), bias.data(), tokens, experts, top_k, false, scores.data(),
                      indices.data(), counts.data());
    const int64_t n = tokens * top_k;
    std::vector<float> rows(n * dim), offsets(experts + 1), perm(n);
    moe_dispatch_forward(x.data(), scores.data(), indices.data(), tokens, dim, top_k, experts,
                         rows.data(), offsets.data(), perm.data());
    std::vector<float> h(n * hidden);
    grouped_linear_forward(rows.data(), offsets.data(), w1.data(), experts, n, dim, hidden,
                           h.data());
    std::vector<float> y(tokens * hidden);
    moe_combine_forward(h.data(), perm.data(), tokens, hidden, top_k, y.data());
    // Backward through combine, the grouped GEMM, dispatch and routing.
    std::vector<float> dh(n * hidden, 0.0f), drows(n * dim, 0.0f), dw1(w1.size(), 0.0f);
    moe_combine_backward(dy.data(), perm.data(), tokens, hidden, top_k, dh.data());
    grouped_linear_backward(dh.data(), rows.data(), offsets.data(), w1.data(), experts, n, dim,
                            hidden, drows.data(), dw1.data());
    std::vector<float> dx(tokens * dim, 0.0f), dscores(n, 0.0f), dlogits(tokens * experts, 0.0f);
    moe_dispatch_backward(drows.data(), x.data(), scores.data(), perm.data(), tokens, dim, top_k,
                          dx.data(), dscores.data());
    moe_route_backward(dscores.data(), logits.data(), indices.data(), tokens, experts, top_k, false,
                       dlogits.data());
    return std::vector<std::vector<float>>{scores, indices, counts, rows, h,       y,
                                           dh,     drows,   dw1,    dx,   dscores, dlogits};
  });
}

// run_items_stealing runs every item exactly once at any thread count. With
// two threads, thread 0 is held in its first item (item 0) until thread 1 has taken
// one of its items: thread 1 must finish its own run (the back half) and
// then take from the end of thread 0's; without stealing thread 0 would be
// released only by the 10 s timeout, and the check of a taken item fails.
TEST(ThreadCount, ItemsRunOnceAndASlowThreadsRunIsTaken) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadsGuard guard(threads);
    for (int64_t n : {0, 1, 2, 5, 64, 1001}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      detail::run_items_stealing(n, true, [&](int64_t i) { runs[static_cast<size_t>(i)]++; });
      for (int64_t i = 0; i < n; ++i)
        EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << "item " << i << ", " << threads;
    }
  }
  ThreadsGuard two(2);
  if (num_threads() < 2 || !detail::work_stealing())
    GTEST_SKIP() << "one thread only, or REMAT_WORK_STEALING=0";
  constexpr int64_t kItems = 40;
  std::vector<int> ran_by(kItems, -1);
  std::atomic<bool> taken{false};
  detail::run_items_stealing(kItems, true, [&](int64_t i) {
    const int t = omp_get_thread_num();
    ran_by[static_cast<size_t>(i)] = t;
    if (t == 1 && i < kItems / 2) taken = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (t == 0 && i == 0 && !taken && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  for (int64_t i = kItems / 2; i < kItems; ++i)
    EXPECT_EQ(ran_by[static_cast<size_t>(i)], 1) << "thread 1's own item " << i;
  EXPECT_TRUE(taken.load()) << "no item of the held thread's run was taken";
  EXPECT_EQ(ran_by[kItems / 2 - 1], 1) << "taken from the end of the run";
}

}  // namespace
}  // namespace remat::cpu
