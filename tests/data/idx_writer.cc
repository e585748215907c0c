#include "tests/data/idx_writer.h"

#include <stdlib.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace pipewright::data::testing {

std::string make_temp_dir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/idx_test_XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
  return templ;
}

std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                               const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out;
  auto put_u32 = [&out](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  };
  put_u32(magic);
  for (uint32_t d : dims) put_u32(d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (f == nullptr) throw std::runtime_error("gzopen failed for " + path);
    const int written = bytes.empty() ? 0 : gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    const int closed = gzclose(f);
    if (written != static_cast<int>(bytes.size()) || closed != Z_OK) {
      throw std::runtime_error("gzwrite failed for " + path);
    }
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("fopen failed for " + path);
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  if (std::fclose(f) != 0 || written != bytes.size()) {
    throw std::runtime_error("fwrite failed for " + path);
  }
}

std::vector<uint8_t> ramp(int64_t n, int modulo) {
  std::vector<uint8_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(i % modulo);
  return out;
}

}  // namespace pipewright::data::testing
