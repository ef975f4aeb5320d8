// touch_malloc_headroom: blocks taken past the heap's high-water mark land
// on pages already written. Each case runs in a fresh process (a death
// test), with main()'s malloc settings, so the heap holds nothing from other
// tests and the fault counts are this code's alone.
#include "core/host_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace remat {
namespace {

constexpr int64_t kPage = 4096;
constexpr size_t kBlock = 64 << 10;
constexpr int kBlocks = 48;  // 3 MiB, past anything the heap held before

// Page faults while taking and writing kBlocks blocks (all held at once, so
// they cannot reuse each other), then freeing them.
int64_t faults_of_new_blocks() {
  std::vector<void*> blocks;
  blocks.reserve(kBlocks);
  const int64_t before = process_minor_faults();
  for (int i = 0; i < kBlocks; ++i) {
    void* block = std::malloc(kBlock);
    if (block == nullptr) std::abort();
    std::memset(block, 1, kBlock);
    blocks.push_back(block);
  }
  const int64_t faults = process_minor_faults() - before;
  for (void* block : blocks) std::free(block);
  return faults;
}

void exit_with(bool ok) { std::exit(ok ? 0 : 1); }

// Under AddressSanitizer malloc is its allocator (size-class regions and a
// quarantine of freed blocks), not glibc's arenas with a top to grow.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_WITHOUT_GLIBC_MALLOC() GTEST_SKIP() << "malloc is AddressSanitizer's, not glibc's"
#else
#define SKIP_WITHOUT_GLIBC_MALLOC() (void)0
#endif

TEST(MallocHeadroom, BlocksPastTheHighWaterMarkFaultWithoutIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The control: the count sees fresh heap pages (3 MiB is 768 of them).
  EXPECT_EXIT(
      {
        keep_malloc_memory_mapped();
        exit_with(faults_of_new_blocks() > kBlocks * static_cast<int64_t>(kBlock) / kPage / 2);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MallocHeadroom, BlocksWithinItFaultNothing) {
  SKIP_WITHOUT_GLIBC_MALLOC();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        keep_malloc_memory_mapped();
        touch_malloc_headroom(4 << 20);
        // A few pages of slack: the gtest child's own bookkeeping.
        exit_with(faults_of_new_blocks() <= 8);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MallocHeadroom, TakesAtMostTheHeadroomInFreshPages) {
  SKIP_WITHOUT_GLIBC_MALLOC();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        keep_malloc_memory_mapped();
        const int64_t before = process_minor_faults();
        touch_malloc_headroom(1 << 20);
        const int64_t faults = process_minor_faults() - before;
        // 256 pages, and the odd page malloc's bookkeeping writes around
        // them (about a quarter more, measured).
        exit_with(faults >= 256 && faults <= 256 + 128);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace remat
