// CRC-32C (Castagnoli), the checksum remat stores for every tensor of a
// checkpoint so flipped bytes are caught on load. Hardware-accelerated with
// SSE4.2 (part of the AVX2 baseline), so checking a checkpoint costs far
// less than reading it.
#pragma once

#include <cstdint>
#include <string>

namespace remat {

// The standard CRC-32C of `bytes` bytes at `data` ("123456789" -> 0xe3069283).
// `crc` continues an earlier value, so a buffer can be checked in pieces.
uint32_t crc32c(const void* data, uint64_t bytes, uint32_t crc = 0);

// Eight lower-case hex digits, as stored in checkpoint metadata.
std::string crc32c_hex(uint32_t crc);

}  // namespace remat
