// NumPy .npy files: token files in, token and float arrays out.
//
// Reading accepts what `numpy.save` writes for a token array: format version
// 1.0, 2.0 or 3.0, a one-dimensional array of dtype '<u2', '<u4', '<i4' or
// '<i8' (little-endian). Every value must fit an int32 and be >= 0. Anything
// else (missing file, directory, bad magic, truncated header or data, another
// dtype, another rank) throws InputError naming the file and what was expected.
//
// Writing is atomic: the bytes go to `path + ".tmp"`, which is then renamed
// over `path`, so a reader never sees half a file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace remat {

std::vector<int32_t> read_npy_tokens(const std::string& path);

// Writes a 1-D '<i4' array (format 1.0).
void write_npy_int32(const std::string& path, std::span<const int32_t> values);

// Writes a C-order '<f4' array of the given shape (format 1.0); data.size()
// must equal the product of shape (else std::invalid_argument).
void write_npy_float32(const std::string& path, std::span<const float> data,
                       const std::vector<int64_t>& shape);

}  // namespace remat
