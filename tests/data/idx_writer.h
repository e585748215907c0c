// Test helpers: a fresh temporary directory and IDX files written from bytes (raw or gzip),
// so the data tests build their own inputs, including broken ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipewright::data::testing {

/// A new empty directory under $TEST_TMPDIR (set by `bazel test`), else under /tmp.
/// Throws std::runtime_error when it cannot be created.
std::string make_temp_dir();

/// The bytes of an IDX file: the 4-byte magic, each dim as big-endian uint32, then `payload`
/// (which need not match the dims: tests write inconsistent files on purpose).
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload);

/// Writes `bytes` to `path`, gzip-compressed (zlib gzopen "wb") when `gzip`, else as is.
void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip);

/// `n` bytes 0, 1, 2, ... (mod `modulo`).
std::vector<uint8_t> ramp(int64_t n, int modulo = 256);

}  // namespace pipewright::data::testing
