// Stop signals never land on a thread that runs kernels (train/stop_signal.h
// route_stop_signals_to_own_thread). oneDNN's JIT f32 GEMM points the stack
// pointer at a heap buffer while it runs, so a handler run on its thread
// writes the signal frame over the heap: under mpirun, Ctrl-C's SIGTERM
// corrupted the heap of a rank in about half the runs. Here a storm of
// SIGTERMs to the process meets oneDNN f32 matmuls running on the main
// thread and on OpenMP workers: every product keeps its bits, nothing
// aborts, and the stop is still recorded. Without the routing (main() not
// calling it), this test dies of heap corruption or sees changed bits.
#include "train/stop_signal.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm_onednn.h"

namespace remat {
namespace {

bool stop_signals_blocked_here() {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, SIGINT) == 1 && sigismember(&mask, SIGTERM) == 1;
}

// A block of a debug-model product whose A is a strided view (lda > k), as
// the linear layers' are: oneDNN runs it on gemm:jit, the kernel that moves
// the stack pointer (with a dense A it picks brgemm, which does not).
constexpr int64_t kM = 512, kN = 256, kK = 512, kLda = 768;

std::vector<float> product(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(kM * kN);
  cpu::detail::gemm_onednn_f32(false, false, kM, kN, kK, a.data(), kLda, b.data(), kN,
                               cpu::CWrite::kFresh, c.data(), kN);
  return c;
}

// The exit status of a process that routes the signals as main() does, then
// multiplies under the storm: 0 when all holds, else what failed.
int products_under_a_signal_storm() {
  route_stop_signals_to_own_thread();
  const StopSignals stop;
  std::vector<float> a(kM * kLda), b(kK * kN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 89) / 89.0f - 0.5f;
  const std::vector<float> expected = product(a, b);

  std::atomic<bool> storming{true};
  std::thread storm([&] {
    for (int i = 0; i < 4000 && storming; ++i) {
      ::kill(::getpid(), SIGTERM);  // to the process: the kernel picks the thread
      ::usleep(100);
    }
    storming = false;
  });
  std::atomic<int> blocked_threads{0}, changed{0};
  while (storming) {
#pragma omp parallel num_threads(2)
    {
      if (stop_signals_blocked_here()) ++blocked_threads;
      if (product(a, b) != expected) ++changed;
    }
  }
  storm.join();
  if (changed > 0) return 3;
  if (blocked_threads == 0) return 4;
  if (stop.received() != SIGTERM) return 5;
  return 0;
}

TEST(StopSignals, NeverHandledOnAKernelThread) {
  if (!cpu::detail::onednn_f32_available()) GTEST_SKIP() << "oneDNN has no JIT f32 matmul here";
  ASSERT_EQ(cpu::detail::onednn_f32_implementation(false, false, kM, kN, kK, kLda, kN,
                                                   cpu::CWrite::kFresh, kN),
            "gemm:jit");
  // Its own process, started afresh: the routing must come before any thread.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(products_under_a_signal_storm()), ::testing::ExitedWithCode(0), "");
}

TEST(StopSignals, ThreadsStartedAfterTheRoutingBlockBoth) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        route_stop_signals_to_own_thread();
        bool all = stop_signals_blocked_here();
        std::thread([&] { all = all && stop_signals_blocked_here(); }).join();
#pragma omp parallel num_threads(2)
        {
#pragma omp critical
          all = all && stop_signals_blocked_here();
        }
        std::exit(all ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Their default action still ends the process: Ctrl-C outside training
// (a plan, a generation) stops it as before.
TEST(StopSignals, DefaultActionStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        route_stop_signals_to_own_thread();
        ::kill(::getpid(), SIGTERM);
        for (int i = 0; i < 500; ++i) ::usleep(10000);  // 5 s for the signal to land
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
}  // namespace remat
