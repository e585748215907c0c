// Fuzzes the IDX reader (data/idx.h) on plain and gzip input (zlib's gzread passes plain
// files through, so one file serves both). Every input must either throw IdxError naming the
// file, or give an array whose dims match the requested rank and whose byte count is their
// product; labels must be in range.
#include <cstdint>
#include <string>
#include <string_view>

#include "data/idx.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace data = pipewright::data;
using pipewright::fuzz::check;

void check_array(const data::IdxArray& a, size_t rank) {
  check(a.dims.size() == rank, "rank " + std::to_string(a.dims.size()));
  int64_t numel = 1;
  for (int64_t d : a.dims) {
    check(d >= 1, "a dimension below 1");
    numel *= d;
  }
  check(numel == a.numel(), "payload size differs from the product of the dims");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static const std::string path = pipewright::fuzz::scratch_path("input.idx");
  pipewright::fuzz::write_file(path, bytes, size);
  auto expect_named = [&](const data::IdxError& e) {
    check(std::string_view(e.what()).substr(0, path.size() + 2) == path + ": ",
          std::string("error does not start with the path: ") + e.what());
  };
  for (int rank : {1, 3}) {
    try {
      check_array(data::read_idx_ubyte(path, rank), static_cast<size_t>(rank));
    } catch (const data::IdxError& e) {
      expect_named(e);
    }
  }
  try {
    const data::IdxArray labels = data::read_idx_labels(path, 10);
    check_array(labels, 1);
    for (uint8_t v : labels.bytes) check(v < 10, "label " + std::to_string(v) + " accepted");
  } catch (const data::IdxError& e) {
    expect_named(e);
  }
  return 0;
}
