// IDX reader on small files the test writes itself, raw and gzip, valid and broken.
#include "data/idx.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/data/idx_writer.h"

namespace pipewright::data {
namespace {

using Catch::Contains;
using testing::idx_bytes;
using testing::ramp;
using testing::write_file;

// The message of the IdxError `f` throws (fails the test when it throws nothing).
template <class F>
std::string idx_error(F&& f) {
  try {
    f();
  } catch (const IdxError& e) {
    return e.what();
  }
  FAIL("expected an IdxError");
  return "";
}

std::vector<uint8_t> read_raw(const std::string& path) {
  std::vector<uint8_t> out;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  return out;
}

TEST_CASE("IDX images and labels round-trip, raw and gzip") {
  const bool gzip = GENERATE(false, true);
  const std::string dir = testing::make_temp_dir();
  const std::string images_path = dir + (gzip ? "/images.gz" : "/images");
  const std::string labels_path = dir + (gzip ? "/labels.gz" : "/labels");
  const std::vector<uint8_t> pixels = ramp(3 * 4 * 5);
  write_file(images_path, idx_bytes(kIdxMagicImages, {3, 4, 5}, pixels), gzip);
  write_file(labels_path, idx_bytes(kIdxMagicLabels, {3}, {2, 0, 9}), gzip);

  const IdxArray images = read_idx_images(images_path);
  REQUIRE(images.dims == std::vector<int64_t>{3, 4, 5});
  REQUIRE(images.numel() == 60);
  REQUIRE(images.bytes == pixels);

  const IdxArray labels = read_idx_labels(labels_path, 10);
  REQUIRE(labels.dims == std::vector<int64_t>{3});
  REQUIRE(labels.bytes == std::vector<uint8_t>{2, 0, 9});
}

TEST_CASE("IDX payload larger than one read chunk round-trips") {
  const std::string path = testing::make_temp_dir() + "/big.gz";
  const std::vector<uint8_t> pixels = ramp(3 * 700 * 1000, 251);  // 2.1 MB, over 1 MiB chunks
  write_file(path, idx_bytes(kIdxMagicImages, {3, 700, 1000}, pixels), true);
  const bool same_bytes = read_idx_images(path).bytes == pixels;  // (no 2 MB expansion on failure)
  REQUIRE(same_bytes);
}

TEST_CASE("IDX truncated payload names the file, expected and actual bytes") {
  const bool gzip = GENERATE(false, true);
  const std::string path = testing::make_temp_dir() + "/short";
  write_file(path, idx_bytes(kIdxMagicImages, {2, 3, 4}, ramp(20)), gzip);
  const std::string msg = idx_error([&] { read_idx_images(path); });
  CHECK_THAT(msg, Contains(path) && Contains("truncated payload") && Contains("expected 24 bytes") &&
                      Contains("got 20"));
}

TEST_CASE("IDX truncated header is reported") {
  const std::string path = testing::make_temp_dir() + "/header";
  std::vector<uint8_t> bytes = idx_bytes(kIdxMagicImages, {2, 3, 4}, {});
  bytes.resize(9);  // magic + one dim + one byte of the second
  write_file(path, bytes, false);
  const std::string msg = idx_error([&] { read_idx_images(path); });
  CHECK_THAT(msg, Contains(path) && Contains("truncated header") && Contains("expected 12 bytes of the dimensions") &&
                      Contains("got 5"));

  write_file(path, {0, 0}, false);
  CHECK_THAT(idx_error([&] { read_idx_images(path); }),
             Contains("truncated header") && Contains("magic number"));
}

TEST_CASE("IDX cut-off gzip stream is reported") {
  const std::string dir = testing::make_temp_dir();
  const std::string gz_path = dir + "/full.gz";
  // Pseudo-random pixels (an LCG) barely compress, so half the stream is half the payload.
  std::vector<uint8_t> pixels(7840);
  uint32_t state = 12345;
  for (uint8_t& p : pixels) p = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
  write_file(gz_path, idx_bytes(kIdxMagicImages, {10, 28, 28}, pixels), true);
  std::vector<uint8_t> compressed = read_raw(gz_path);

  // Cut in the middle of the deflate data: the payload comes up short.
  const std::string cut_path = dir + "/cut.gz";
  std::vector<uint8_t> half(compressed.begin(), compressed.begin() + compressed.size() / 2);
  write_file(cut_path, half, false);
  CHECK_THAT(idx_error([&] { read_idx_images(cut_path); }),
             Contains(cut_path) && Contains("truncated payload") && Contains("expected 7840 bytes"));

  // Flip a byte of the CRC-32 trailer: the payload is complete but the stream is corrupt.
  const std::string crc_path = dir + "/crc.gz";
  compressed[compressed.size() - 8] ^= 0xFF;
  write_file(crc_path, compressed, false);
  CHECK_THAT(idx_error([&] { read_idx_images(crc_path); }),
             Contains(crc_path) && Contains("corrupt gzip stream"));
}

TEST_CASE("IDX trailing bytes are rejected") {
  const bool gzip = GENERATE(false, true);
  const std::string path = testing::make_temp_dir() + "/long";
  write_file(path, idx_bytes(kIdxMagicLabels, {4}, {1, 2, 3, 4, 5, 6, 7}), gzip);
  CHECK_THAT(idx_error([&] { read_idx_labels(path, 10); }),
             Contains(path) && Contains("3 trailing bytes") && Contains("4-byte payload"));
}

TEST_CASE("IDX wrong magic number is rejected") {
  const std::string path = testing::make_temp_dir() + "/magic";
  write_file(path, idx_bytes(0x89504E47, {1, 1, 1}, {0}), false);
  CHECK_THAT(idx_error([&] { read_idx_images(path); }),
             Contains(path) && Contains("bad magic number 0x89504E47") &&
                 Contains("expected 0x00000803"));
}

TEST_CASE("IDX type codes other than unsigned byte are rejected") {
  const std::string path = testing::make_temp_dir() + "/float";
  write_file(path, idx_bytes(0x00000D03, {1, 1, 1}, {0, 0, 0, 0}), true);
  CHECK_THAT(idx_error([&] { read_idx_images(path); }),
             Contains(path) && Contains("type code 0x0D (float32)") &&
                 Contains("expected magic 0x00000803"));
}

TEST_CASE("IDX rank other than expected is rejected") {
  const std::string path = testing::make_temp_dir() + "/labels";
  write_file(path, idx_bytes(kIdxMagicLabels, {3}, {0, 1, 2}), false);
  CHECK_THAT(idx_error([&] { read_idx_images(path); }),
             Contains(path) && Contains("rank 1 (magic 0x00000801)") &&
                 Contains("expected rank 3 (magic 0x00000803)"));
}

TEST_CASE("IDX zero or absurd dimensions are rejected") {
  const std::string path = testing::make_temp_dir() + "/dims";
  write_file(path, idx_bytes(kIdxMagicImages, {5, 0, 28}, {}), false);
  CHECK_THAT(idx_error([&] { read_idx_images(path); }),
             Contains(path) && Contains("dimension 1 has size 0"));

  write_file(path, idx_bytes(kIdxMagicImages, {0xFFFFFFFF, 0xFFFFFFFF, 28}, {}), false);
  CHECK_THAT(idx_error([&] { read_idx_images(path); }),
             Contains(path) && Contains("corrupt header"));
}

TEST_CASE("IDX label outside [0, num_classes) is rejected") {
  const std::string path = testing::make_temp_dir() + "/labels.gz";
  write_file(path, idx_bytes(kIdxMagicLabels, {4}, {0, 9, 10, 3}), true);
  CHECK_THAT(idx_error([&] { read_idx_labels(path, 10); }),
             Contains(path) && Contains("label 2 is 10, outside [0, 10)"));
  REQUIRE(read_idx_labels(path, 11).numel() == 4);
  REQUIRE_THROWS_AS(read_idx_labels(path, 0), std::invalid_argument);
}

TEST_CASE("IDX missing file or directory names the path") {
  const std::string dir = testing::make_temp_dir();
  const std::string path = dir + "/does-not-exist.gz";
  CHECK_THAT(idx_error([&] { read_idx_images(path); }), Contains(path) && Contains("not found"));
  CHECK_THAT(idx_error([&] { read_idx_labels(dir, 10); }),
             Contains(dir) && Contains("is a directory"));
}

TEST_CASE("IdxError is a std::runtime_error") {
  const std::string path = testing::make_temp_dir() + "/missing";
  REQUIRE_THROWS_AS(read_idx_images(path), std::runtime_error);
}

}  // namespace
}  // namespace pipewright::data
