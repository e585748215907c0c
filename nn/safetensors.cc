// File I/O of safetensors: the atomic save (temporary file, fsync, rename) and the validating
// load. The header itself is built and checked in nn/safetensors_header.cc.
#include "nn/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <system_error>

#include "nn/safetensors_header.h"

namespace pipewright::nn {

// Tensor bytes are written and read as they are in memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O here assumes a little-endian machine");

namespace {

using safetensors_detail::Header;
using safetensors_detail::TensorEntry;

std::string system_error_text(int err) { return std::generic_category().message(err); }

// Closes a file descriptor on scope exit (errors of close() on a read-only fd do not matter).
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(const std::string& tmp, int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      throw SafetensorsError(tmp, "cannot write: " + system_error_text(w < 0 ? errno : EIO));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Where a load reads from: a file or bytes in memory. read() fills exactly n bytes at
// `offset` or throws SafetensorsError (a short file is a corrupted file).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  virtual void read(void* data, size_t n, uint64_t offset) = 0;
};

class FileSource final : public ByteSource {
 public:
  FileSource(const std::string& path, int fd, uint64_t size) : path_(path), fd_(fd), size_(size) {}
  uint64_t size() const override { return size_; }
  void read(void* data, size_t n, uint64_t offset) override {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw SafetensorsError(path_, "cannot read: " + system_error_text(errno));
      if (r == 0) throw SafetensorsError(path_, "unexpected end of file (was it truncated?)");
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

 private:
  const std::string& path_;
  int fd_;
  uint64_t size_;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const std::string& name, std::string_view bytes) : name_(name), bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  void read(void* data, size_t n, uint64_t offset) override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) {
      throw SafetensorsError(name_, "unexpected end of file (was it truncated?)");
    }
    if (n > 0) std::memcpy(data, bytes_.data() + offset, n);
  }

 private:
  const std::string& name_;
  std::string_view bytes_;
};

// CRC-32 (zlib's, the gzip/PNG polynomial) of Note [Checksum], extended by `n` bytes.
uint32_t crc_update(uint32_t crc, const void* data, size_t n) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string checksum_value(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "crc32:%08x", crc);
  return buf;
}

// The CRC a checksum value states; throws SafetensorsError when the value is malformed.
uint32_t parse_checksum_value(const std::string& path, const std::string& value) {
  const std::string prefix = "crc32:";
  bool ok = value.size() == prefix.size() + 8 && value.compare(0, prefix.size(), prefix) == 0;
  uint32_t crc = 0;
  for (size_t i = prefix.size(); ok && i < value.size(); ++i) {
    const char c = value[i];
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    ok = digit >= 0;
    crc = (crc << 4) | static_cast<uint32_t>(digit & 0xf);
  }
  if (!ok) {
    throw SafetensorsError(path, std::string("metadata '") + kChecksumKey + "' is '" + value +
                                     "', expected 'crc32:' and 8 lowercase hex digits "
                                     "(corrupted header?)");
  }
  return crc;
}

// The tensor as contiguous CPU memory ready to write (a copy only when needed).
Tensor host_contiguous(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu(0));
  return host.contiguous();
}

// Flushes the directory entry of a rename to disk. Best effort: the rename already happened,
// so a failure here is not reported as a failed save.
void sync_parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_file(const std::string& tmp, const std::string& header, const NamedTensors& tensors) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw SafetensorsError(tmp, "cannot create the temporary file: " + system_error_text(errno));
  }
  try {
    uint8_t size_bytes[8];
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) size_bytes[i] = static_cast<uint8_t>(n >> (8 * i));
    write_all(tmp, fd, size_bytes, sizeof size_bytes);
    write_all(tmp, fd, header.data(), header.size());
    for (const auto& [name, t] : tensors) {
      const Tensor host = host_contiguous(t);
      if (host.nbytes() > 0) write_all(tmp, fd, host.raw_data(), host.nbytes());
    }
    if (::fsync(fd) != 0) {
      throw SafetensorsError(tmp, "cannot fsync: " + system_error_text(errno));
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw SafetensorsError(tmp, "cannot close: " + system_error_text(err));
  }
}

}  // namespace

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [key, t] : tensors) {
    if (key == name) return t;
  }
  throw std::out_of_range("safetensors file has no tensor named '" + name + "'");
}

uint32_t save_safetensors(const std::string& path, const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata) {
  // Everything that can be checked is checked before the disk is touched.
  std::vector<TensorEntry> entries;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) {
      throw std::invalid_argument("save_safetensors(" + path + "): tensor '" + name +
                                  "' is undefined");
    }
    entries.push_back({.name = name, .dtype = t.dtype(), .shape = t.shape(),
                       .begin = offset, .end = offset + t.nbytes()});
    offset += t.nbytes();
  }
  if (metadata.count(kChecksumKey) != 0) {
    throw std::invalid_argument("save_safetensors(" + path + "): the metadata key '" +
                                kChecksumKey + "' is reserved for the checksum");
  }
  // Note [Checksum]: the header without the checksum, then the data, in file order.
  uint32_t crc = 0;
  const std::string unchecked = safetensors_detail::build_header(entries, metadata);
  crc = crc_update(crc, unchecked.data(), unchecked.size());
  for (const auto& [name, t] : tensors) {
    const Tensor host = host_contiguous(t);
    if (host.nbytes() > 0) crc = crc_update(crc, host.raw_data(), host.nbytes());
  }
  std::map<std::string, std::string> with_checksum = metadata;
  with_checksum[kChecksumKey] = checksum_value(crc);
  const std::string header = safetensors_detail::build_header(entries, with_checksum);

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write_file(tmp, header, tensors);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw SafetensorsError(path, "cannot rename the temporary file '" + tmp + "' to it: " +
                                     system_error_text(err));
  }
  sync_parent_directory(path);
  return crc;
}

namespace {

// The validating load of Note [Checksum] and safetensors.h, from any source.
SafetensorsFile load_from(const std::string& path, ByteSource& source) {
  const uint64_t file_bytes = source.size();
  if (file_bytes < 8) {
    throw SafetensorsError(path, "file is " + std::to_string(file_bytes) +
                                     " bytes, shorter than the 8-byte header size");
  }
  uint8_t size_bytes[8];
  source.read(size_bytes, 8, 0);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | size_bytes[i];
  if (header_bytes > safetensors_detail::kMaxHeaderBytes) {
    throw SafetensorsError(path, "header size " + std::to_string(header_bytes) +
                                     " exceeds the limit of 100 MB");
  }
  if (header_bytes > file_bytes - 8) {
    throw SafetensorsError(path, "header size " + std::to_string(header_bytes) +
                                     " exceeds the " + std::to_string(file_bytes - 8) +
                                     " bytes after the size field");
  }
  std::string header_text(header_bytes, '\0');
  source.read(header_text.data(), header_bytes, 8);
  const uint64_t data_start = 8 + header_bytes;
  Header header = safetensors_detail::parse_header(path, header_text, file_bytes - data_start);

  SafetensorsFile out;
  std::optional<uint32_t> expected_crc;
  if (auto it = header.metadata.find(kChecksumKey); it != header.metadata.end()) {
    expected_crc = parse_checksum_value(path, it->second);
    header.metadata.erase(it);
  }
  uint32_t crc = 0;
  if (expected_crc) {
    std::string unchecked;
    try {
      unchecked = safetensors_detail::build_header(header.tensors, header.metadata);
    } catch (const std::invalid_argument& e) {
      throw SafetensorsError(path, std::string("header cannot be checksummed: ") + e.what());
    }
    crc = crc_update(crc, unchecked.data(), unchecked.size());
  }
  out.metadata = std::move(header.metadata);
  for (const TensorEntry& e : header.tensors) {
    Tensor t = Tensor::empty(e.shape, {.dtype = e.dtype, .device = Device::cpu(0)});
    if (t.nbytes() > 0) {
      source.read(t.raw_data(), t.nbytes(), data_start + e.begin);
      if (expected_crc) crc = crc_update(crc, t.raw_data(), t.nbytes());
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  if (expected_crc && crc != *expected_crc) {
    throw SafetensorsError(path, "checksum mismatch: the metadata says " +
                                     checksum_value(*expected_crc) + ", the contents hash to " +
                                     checksum_value(crc) +
                                     " (the file is corrupted: altered bytes or a partial write)");
  }
  out.verified = expected_crc.has_value();
  out.checksum = expected_crc.value_or(0);
  return out;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  FdGuard file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) throw SafetensorsError(path, "cannot open: " + system_error_text(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) {
    throw SafetensorsError(path, "cannot stat: " + system_error_text(errno));
  }
  if (!S_ISREG(st.st_mode)) throw SafetensorsError(path, "not a regular file");
  FileSource source(path, file.fd, static_cast<uint64_t>(st.st_size));
  return load_from(path, source);
}

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name) {
  MemorySource source(name, bytes);
  return load_from(name, source);
}

}  // namespace pipewright::nn
