// Helpers shared by the fuzz targets: a scratch file per process, and a check that aborts
// (which libFuzzer reports as a crash, with the input saved) when an invariant breaks.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace pipewright::fuzz {

/// Aborts with `what` when `ok` is false: an accepted input broke a promise of the API.
inline void check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

/// A path in a RAM-backed directory (/dev/shm when present, else $TMPDIR or /tmp), one per
/// process and `tag`, so parallel fuzzing jobs do not share files.
inline std::string scratch_path(const std::string& tag) {
  std::string dir = "/dev/shm";
  if (::access(dir.c_str(), W_OK) != 0) {
    const char* tmp = std::getenv("TMPDIR");
    dir = tmp != nullptr ? tmp : "/tmp";
  }
  return dir + "/pipewright_fuzz_" + std::to_string(::getpid()) + "_" + tag;
}

/// Writes `size` bytes to `path` (replacing it) and returns `path`.
inline const std::string& write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  check(out.good(), "cannot write the scratch file " + path);
  return path;
}

}  // namespace pipewright::fuzz
