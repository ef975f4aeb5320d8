#include "core/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/tensor.h"

namespace remat {
namespace {

TEST(Crc32c, StandardCheckValue) {
  // The published check value of CRC-32C (RFC 3720, appendix B.4).
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c_hex(0xe3069283u), "e3069283");
  EXPECT_EQ(crc32c_hex(0x0000000fu), "0000000f");
}

TEST(Crc32c, PiecesContinueAndOneFlippedBitChangesIt) {
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 3);
  const uint32_t whole = crc32c(data.data(), data.size());
  EXPECT_EQ(crc32c(data.data() + 13, data.size() - 13, crc32c(data.data(), 13)), whole);
  data[517] ^= 0x10;
  EXPECT_NE(crc32c(data.data(), data.size()), whole);
}

TEST(Numel, OverflowIsReportedNotWrapped) {
  EXPECT_EQ(numel({3, 4, 5}), 60);
  EXPECT_EQ(numel({}), 1);
  const int64_t big = int64_t{1} << 62;
  EXPECT_THROW(numel({big, 4}), std::overflow_error);
  EXPECT_THROW(numel({4611686018427387904, 2048}), std::overflow_error);
  EXPECT_THROW(numel({-1, 4}), std::overflow_error);
}

}  // namespace
}  // namespace remat
