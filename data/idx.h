// IDX reader: the file format of MNIST and Fashion-MNIST.
//
// Source: Yann LeCun's MNIST page, "FILE FORMATS FOR THE MNIST DATABASE"
// (http://yann.lecun.com/exdb/mnist/). An IDX file is
//
//   offset  size       content
//   0       2 bytes    0x00 0x00
//   2       1 byte     type code: 0x08 = unsigned byte (the only one read here; the spec also
//                      has 0x09 signed byte, 0x0B short, 0x0C int, 0x0D float, 0x0E double)
//   3       1 byte     rank (number of dimensions)
//   4       4*rank     each dimension's size, 32-bit big-endian, outermost first
//   ...     prod(dims) the payload, row-major, one byte per element
//
// so images are magic 0x00000803 ([N, rows, cols]) and labels 0x00000801 ([N]).
// Files may be gzip-compressed (*.gz, as distributed) or plain: zlib's gzread reads both.
//
// This header depends on nothing but the standard library: it returns raw bytes, and
// data/fashion_mnist.h turns them into tensors.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipewright::data {

/// Every problem reading an IDX file: missing or unreadable file, bad magic number, bad type
/// code or rank, zero or oversized dimension, truncated payload, trailing bytes, corrupt
/// gzip stream, label out of range. The message always starts with the file path, e.g.
///   "/tmp/x/train-labels-idx1-ubyte.gz: truncated payload: expected 60000 bytes, got 59990".
class IdxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The IDX type code for unsigned bytes, and the magic numbers built from it.
inline constexpr uint8_t kIdxTypeUnsignedByte = 0x08;
inline constexpr uint32_t kIdxMagicImages = 0x00000803;  // ubyte, rank 3
inline constexpr uint32_t kIdxMagicLabels = 0x00000801;  // ubyte, rank 1

/// Largest payload accepted (1 GiB): a corrupt header must not make the reader try to read
/// (or wait for) terabytes. Fashion-MNIST's largest file is 47 MB.
inline constexpr int64_t kIdxMaxPayloadBytes = int64_t{1} << 30;

/// A decoded unsigned-byte IDX array.
struct IdxArray {
  std::vector<int64_t> dims;   // sizes, outermost first (e.g. {60000, 28, 28})
  std::vector<uint8_t> bytes;  // prod(dims) elements, row-major

  /// prod(dims) == bytes.size().
  int64_t numel() const { return static_cast<int64_t>(bytes.size()); }
};

/// Reads an unsigned-byte IDX file of the given rank (gzip or plain).
/// Checks, in order: the file exists and opens; the header is complete; bytes 0-1 are zero;
/// the type code is 0x08; the rank equals `expected_rank`; every dimension is >= 1 and the
/// payload is at most kIdxMaxPayloadBytes; the payload holds exactly prod(dims) bytes (fewer:
/// "truncated", more: "trailing bytes"); the gzip stream is intact.
/// Throws IdxError (message: path, then the problem with the expected and actual values);
/// std::invalid_argument when expected_rank is outside [1, 255].
IdxArray read_idx_ubyte(const std::string& path, int expected_rank);

/// An images file: magic 0x00000803, dims [N, rows, cols], one byte per pixel (0..255).
/// Throws IdxError as read_idx_ubyte.
IdxArray read_idx_images(const std::string& path);

/// A labels file: magic 0x00000801, dims [N], each label in [0, num_classes).
/// Throws IdxError as read_idx_ubyte, and for the first label outside [0, num_classes)
/// (naming its index and value); std::invalid_argument when num_classes is outside [1, 256].
IdxArray read_idx_labels(const std::string& path, int num_classes);

}  // namespace pipewright::data
