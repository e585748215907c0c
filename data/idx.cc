// IDX reader (format: see idx.h). One pass over the file through zlib's gzread, which
// decompresses gzip files and passes plain files through unchanged.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

namespace pipewright::data {
namespace {

// zlib reads at most UINT_MAX bytes per call; 1 MiB chunks also keep a corrupt header from
// allocating memory before the data is really there.
constexpr int64_t kChunkBytes = int64_t{1} << 20;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::string hex8(uint8_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v);
  return buf;
}

// Names of the IDX type codes, for error messages.
const char* type_name(uint8_t code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
  }
}

// An open gzFile that closes itself, plus the path for messages.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) fail("file not found");
    if (std::filesystem::is_directory(path, ec)) fail("is a directory, expected an IDX file");
    file_ = gzopen(path.c_str(), "rb");
    if (file_ == nullptr) fail("cannot open file");
  }
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Appends up to `n` bytes to `out`; returns how many were read (fewer only at end of file).
  int64_t read(std::vector<uint8_t>& out, int64_t n) {
    int64_t total = 0;
    while (total < n) {
      const int64_t want = std::min(n - total, kChunkBytes);
      const size_t old_size = out.size();
      out.resize(old_size + static_cast<size_t>(want));
      const int got = gzread(file_, out.data() + old_size, static_cast<unsigned>(want));
      if (got < 0) fail("corrupt gzip stream: " + zlib_message());
      out.resize(old_size + static_cast<size_t>(got));
      total += got;
      if (got < want) break;  // end of file
    }
    return total;
  }

  // Empty when the stream is intact; zlib's description otherwise (e.g. "unexpected end of
  // file" for a gzip stream cut short, "incorrect data check" for a bad CRC).
  std::string zlib_message() const {
    int errnum = Z_OK;
    std::string msg = gzerror(file_, &errnum);
    if (errnum == Z_OK) return {};
    if (msg.rfind(path_ + ": ", 0) == 0) msg.erase(0, path_.size() + 2);  // zlib prefixes the path
    return msg;
  }

  [[noreturn]] void fail(const std::string& problem) const { throw IdxError(path_ + ": " + problem); }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads exactly n bytes of the header, or fails naming `what`.
std::vector<uint8_t> read_header_part(GzReader& in, int64_t n, const std::string& what) {
  std::vector<uint8_t> buf;
  const int64_t got = in.read(buf, n);
  if (got != n) {
    std::string gz = in.zlib_message();
    in.fail("truncated header: expected " + std::to_string(n) + " bytes of " + what + ", got " +
            std::to_string(got) + (gz.empty() ? "" : " (" + gz + ")"));
  }
  return buf;
}

}  // namespace

IdxArray read_idx_ubyte(const std::string& path, int expected_rank) {
  if (expected_rank < 1 || expected_rank > 255) {
    throw std::invalid_argument("read_idx_ubyte: expected_rank must be in [1, 255], got " +
                                std::to_string(expected_rank) + " (file " + path + ")");
  }
  GzReader in(path);
  const uint32_t expected_magic = (uint32_t{kIdxTypeUnsignedByte} << 8) | uint32_t(expected_rank);

  // 1. Magic number: 0x00 0x00 <type> <rank>.
  const std::vector<uint8_t> magic_bytes = read_header_part(in, 4, "the magic number");
  const uint32_t magic = big_endian_u32(magic_bytes.data());
  if (magic_bytes[0] != 0 || magic_bytes[1] != 0) {
    in.fail("bad magic number " + hex32(magic) + ", expected " + hex32(expected_magic) +
            ": not an IDX file (an IDX file starts with two zero bytes)");
  }
  const uint8_t type = magic_bytes[2];
  const int rank = magic_bytes[3];
  if (type != kIdxTypeUnsignedByte) {
    in.fail("unsupported IDX type code " + hex8(type) + " (" + type_name(type) + ") in magic " +
            hex32(magic) + "; only " + hex8(kIdxTypeUnsignedByte) +
            " (unsigned byte) is read, expected magic " + hex32(expected_magic));
  }
  if (rank != expected_rank) {
    in.fail("rank " + std::to_string(rank) + " (magic " + hex32(magic) + "), expected rank " +
            std::to_string(expected_rank) + " (magic " + hex32(expected_magic) + ")");
  }

  // 2. Dimensions: rank big-endian uint32 values, each >= 1, product within the limit.
  IdxArray out;
  const std::vector<uint8_t> dim_bytes = read_header_part(in, 4 * int64_t{rank}, "the dimensions");
  int64_t numel = 1;
  for (int d = 0; d < rank; ++d) {
    const int64_t size = big_endian_u32(dim_bytes.data() + 4 * d);
    if (size == 0) in.fail("dimension " + std::to_string(d) + " has size 0");
    numel *= size;  // cannot overflow: numel <= 2^30 before, size < 2^32
    if (numel > kIdxMaxPayloadBytes) {
      in.fail("dimensions imply a payload over " + std::to_string(kIdxMaxPayloadBytes) +
              " bytes (dimension " + std::to_string(d) + " is " + std::to_string(size) +
              "): corrupt header?");
    }
    out.dims.push_back(size);
  }

  // 3. Payload: exactly numel bytes, then end of file.
  out.bytes.reserve(static_cast<size_t>(std::min(numel, kChunkBytes)));
  const int64_t got = in.read(out.bytes, numel);
  if (got < numel) {
    std::string gz = in.zlib_message();
    in.fail("truncated payload: expected " + std::to_string(numel) + " bytes, got " +
            std::to_string(got) + (gz.empty() ? "" : " (gzip: " + gz + ")"));
  }
  std::vector<uint8_t> rest;
  int64_t trailing = 0;
  for (int64_t n; (n = in.read(rest, kChunkBytes)) > 0; rest.clear()) trailing += n;
  if (trailing > 0) {
    in.fail(std::to_string(trailing) + " trailing bytes after the " + std::to_string(numel) +
            "-byte payload (the file is longer than its header says)");
  }
  if (std::string gz = in.zlib_message(); !gz.empty()) in.fail("corrupt gzip stream: " + gz);
  return out;
}

IdxArray read_idx_images(const std::string& path) { return read_idx_ubyte(path, 3); }

IdxArray read_idx_labels(const std::string& path, int num_classes) {
  if (num_classes < 1 || num_classes > 256) {
    throw std::invalid_argument("read_idx_labels: num_classes must be in [1, 256], got " +
                                std::to_string(num_classes) + " (file " + path + ")");
  }
  IdxArray labels = read_idx_ubyte(path, 1);
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const int value = labels.bytes[static_cast<size_t>(i)];
    if (value >= num_classes) {
      throw IdxError(path + ": label " + std::to_string(i) + " is " + std::to_string(value) +
                     ", outside [0, " + std::to_string(num_classes) + ")");
    }
  }
  return labels;
}

}  // namespace pipewright::data
