// HostStorage: small buffers from the heap, buffers of 2 MiB or more mapped
// on their own with huge pages asked for. Both kinds are 64-byte aligned,
// writable over their whole size, kept in the cache when released and
// handed out again for the same size; large ones get different cache
// colours.
#include "core/memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

namespace remat {
namespace {

TEST(HostStorage, BuffersOfEverySizeAreAlignedWritableAndReused) {
  HostStorage storage;
  for (int64_t bytes : {int64_t{1}, int64_t{4096}, (int64_t{2} << 20) - 64, int64_t{2} << 20,
                        (int64_t{3} << 20) + 100, int64_t{64} << 20}) {
    SCOPED_TRACE(bytes);
    const int64_t cached_before = storage.cached_bytes();  // earlier sizes' buffers
    void* p = storage.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    std::memset(p, 0xab, static_cast<size_t>(bytes));  // every byte is ours
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0xab);
    storage.release(p, bytes);
    EXPECT_EQ(storage.cached_bytes(), cached_before + (bytes + 63) / 64 * 64);
    EXPECT_EQ(storage.allocate(bytes), p);  // the cached buffer again
    EXPECT_EQ(storage.cached_bytes(), cached_before);
    storage.release(p, bytes);
  }
}

TEST(HostStorage, LargeBuffersLiveSideBySideWithDifferentCacheColours) {
  HostStorage storage;
  const int64_t bytes = int64_t{4} << 20;
  std::vector<unsigned char*> buffers;
  std::set<uintptr_t> colours;
  for (int i = 0; i < 8; ++i) {
    auto* p = static_cast<unsigned char*>(storage.allocate(bytes));
    std::memset(p, i, static_cast<size_t>(bytes));
    buffers.push_back(p);
    colours.insert(reinterpret_cast<uintptr_t>(p) % 4096);
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(buffers[static_cast<size_t>(i)][0], i);
    EXPECT_EQ(buffers[static_cast<size_t>(i)][bytes - 1], i);
  }
#if !defined(__SANITIZE_ADDRESS__)  // under ASan they stay on the heap, uncoloured
  EXPECT_GT(colours.size(), 4u);
#endif
  for (unsigned char* p : buffers) storage.release(p, bytes);
}

}  // namespace
}  // namespace remat
