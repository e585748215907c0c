// safetensors: round trips, a golden file written byte by byte from the specification
// (https://github.com/huggingface/safetensors#format), corrupted files, atomic saves.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
#include "nn/sequential.h"
#include "nn/serialize.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tests/compare.h"

using namespace pipewright;
using Catch::Matchers::Contains;
using pipewright::testing::bitwise_equal;
namespace fs = std::filesystem;

namespace {

// A fresh directory for one test case.
std::string test_dir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(root ? root : "/tmp") /
                       ("safetensors_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// n as 8 little-endian bytes.
std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// The bytes of a safetensors file: size, header, data.
std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Raw bytes of a tensor (for bitwise comparisons, NaN included).
std::string raw(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

// The data bytes of the golden file, spelled out from IEEE 754 / two's complement:
//   a: F32 [1.5, -2.0]   1.5 = 0x3FC00000, -2.0 = 0xC0000000        -> bytes [0, 8)
//   c: F64 [[0.1]]       0.1 = 0x3FB999999999999A                    -> bytes [8, 16)
//   b: I64 7 (rank 0)                                                 -> bytes [16, 24)
const std::string kGoldenData = std::string("\x00\x00\xc0\x3f\x00\x00\x00\xc0", 8) +
                                std::string("\x9a\x99\x99\x99\x99\x99\xb9\x3f", 8) +
                                std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8);

}  // namespace

TEST_CASE("round trip of dtypes, ranks 0..3, views, devices and metadata") {
  const std::string path = test_dir("round_trip") + "/model.safetensors";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor matrix = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  nn::NamedTensors tensors = {
      {"scalar", Tensor::scalar(3.25)},
      {"f64", Tensor::from_vector(std::vector<double>{0.1, -1e300, 5e-324})},
      {"i64", Tensor::from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0,
                                                       1, 42, std::numeric_limits<int64_t>::max()},
                                  Shape{2, 3})},
      {"f32.rank3", Tensor::from_vector(std::vector<float>{nan, inf, -inf, -0.0f, 1, 2, 3, 4},
                                        Shape{2, 2, 2})},
      {"empty", Tensor::zeros({0, 4})},
      {"view", matrix.slice(1, 3)},
      {"on cpu:1", Tensor::from_vector(std::vector<float>{7, 8}, Device::cpu(1))},
  };
  const std::map<std::string, std::string> metadata = {{"epoch", "3"}, {"note", "ünïcode ✓"}};
  nn::save_safetensors(path, tensors, metadata);

  const nn::SafetensorsFile file = nn::load_safetensors(path);
  REQUIRE(file.metadata == metadata);
  REQUIRE(file.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].first);
    const Tensor& got = file.tensors[i].second;
    REQUIRE(file.tensors[i].first == tensors[i].first);
    REQUIRE(got.dtype() == tensors[i].second.dtype());
    REQUIRE(got.shape() == tensors[i].second.shape());
    REQUIRE(got.device() == Device::cpu(0));
    REQUIRE(raw(got) == raw(tensors[i].second.to(Device::cpu(0))));
  }
  REQUIRE(file.at("view").to_vector<double>() == std::vector<double>{3, 4, 5, 6});
  REQUIRE_THROWS_AS(file.at("missing"), std::out_of_range);
  REQUIRE(temp_files(fs::path(path).parent_path().string()).empty());
}

TEST_CASE("a file with no tensors") {
  const std::string path = test_dir("empty") + "/empty.safetensors";
  nn::save_safetensors(path, {});
  // The header holds only the checksum of "{}" padded to 8 bytes (Note [Checksum]).
  const std::string header = R"({"__metadata__":{"pipewright.crc32":"crc32:e95f24c2"}})";
  REQUIRE(read_bytes(path) == le64(56) + header + "  ");
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  REQUIRE(file.tensors.empty());
  REQUIRE(file.metadata.empty());
}

TEST_CASE("golden file written by hand from the specification loads correctly") {
  const std::string dir = test_dir("golden");
  // Keys deliberately not in data order; "b" first.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("b":{"dtype":"I64","shape":[],"data_offsets":[16,24]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("c":{"dtype":"F64","shape":[1,1],"data_offsets":[8,16]}})";
  for (const std::string padding : {"", "  ", "       "}) {  // trailing spaces are allowed
    const std::string path = dir + "/golden.safetensors";
    write_bytes(path, file_bytes(header + padding, kGoldenData));
    const nn::SafetensorsFile file = nn::load_safetensors(path);
    REQUIRE(file.metadata == std::map<std::string, std::string>{{"format", "pt"}});
    REQUIRE(file.tensors.size() == 3);
    // In data order.
    REQUIRE(file.tensors[0].first == "a");
    REQUIRE(file.tensors[1].first == "c");
    REQUIRE(file.tensors[2].first == "b");
    const Tensor& a = file.at("a");
    REQUIRE(a.dtype() == DType::kFloat32);
    REQUIRE(a.shape() == Shape{2});
    REQUIRE(a.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
    const Tensor& c = file.at("c");
    REQUIRE(c.dtype() == DType::kFloat64);
    REQUIRE(c.shape() == Shape{1, 1});
    REQUIRE(c.to_vector<double>() == std::vector<double>{0.1});
    const Tensor& b = file.at("b");
    REQUIRE(b.dtype() == DType::kInt64);
    REQUIRE(b.dim() == 0);
    REQUIRE(b.to_vector<int64_t>() == std::vector<int64_t>{7});
  }
}

TEST_CASE("save_safetensors writes what the specification describes") {
  const std::string path = test_dir("spec") + "/out.safetensors";
  nn::save_safetensors(path,
                       {{"a", Tensor::from_vector(std::vector<float>{1.5f, -2.0f})},
                        {"c", Tensor::from_vector(std::vector<double>{0.1}, Shape{1, 1})},
                        {"b", Tensor::from_vector(std::vector<int64_t>{7}, Shape{})}},
                       {{"format", "pt"}});
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  REQUIRE(n % 8 == 0);  // padded so that the data starts 8-byte aligned
  REQUIRE(bytes.size() == 8 + n + kGoldenData.size());
  const std::string header = bytes.substr(8, n);
  REQUIRE(header.front() == '{');
  const size_t close = header.find_last_of('}');
  REQUIRE(header.find_first_not_of(' ', close + 1) == std::string::npos);  // only spaces after

  const nlohmann::json j = nlohmann::json::parse(header);
  REQUIRE(j.size() == 4);
  // The user's metadata plus the checksum (Note [Checksum]): 8 hex digits.
  REQUIRE(j.at("__metadata__").size() == 2);
  REQUIRE(j.at("__metadata__").at("format") == "pt");
  const std::string checksum = j.at("__metadata__").at(nn::kChecksumKey);
  REQUIRE(checksum.size() == 14);
  REQUIRE(checksum.substr(0, 6) == "crc32:");
  auto check = [&](const char* name, const char* dtype, nlohmann::json shape,
                   nlohmann::json offsets) {
    const nlohmann::json& e = j.at(name);
    REQUIRE(e.size() == 3);
    REQUIRE(e.at("dtype") == dtype);
    REQUIRE(e.at("shape") == shape);
    REQUIRE(e.at("data_offsets") == offsets);
  };
  check("a", "F32", {2}, {0, 8});
  check("c", "F64", {1, 1}, {8, 16});
  check("b", "I64", nlohmann::json::array(), {16, 24});
  REQUIRE(bytes.substr(8 + n) == kGoldenData);
}

TEST_CASE("corrupted files are rejected with the file and the problem named") {
  const std::string dir = test_dir("corrupt");
  const std::string path = dir + "/bad.safetensors";
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return "\"" + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + shape +
           R"(,"data_offsets":)" + offsets + "}";
  };
  struct Case {
    const char* what;
    std::string bytes;
    std::string message;  // a part of what(), which starts with "<path>: "
  };
  const std::vector<Case> cases = {
      {"empty file", "", "file is 0 bytes, shorter than the 8-byte header size"},
      {"truncated size field", std::string("\x08\x00\x00", 3), "file is 3 bytes, shorter than the 8-byte"},
      {"header size past the end", le64(1000) + "{}", "header size 1000 exceeds the 2 bytes"},
      {"absurd header size", le64(uint64_t{1} << 40) + "{}" + std::string(64, ' '),
       "header size 1099511627776 exceeds the limit of 100 MB"},
      {"not JSON", file_bytes(R"({"a": {"dtype": "F32", )", ""), "header is not valid JSON"},
      {"not an object", file_bytes("[1, 2]", ""), "does not start with '{'"},
      {"trailing garbage", file_bytes("{} x", ""), "header is not valid JSON"},
      {"invalid UTF-8", file_bytes("{\"\xff\xfe\": 1}", ""), "header is not valid JSON"},
      {"deep nesting", file_bytes(R"({"a":[[[[[[[[[[1]]]]]]]]]]})", ""), "nested deeper"},
      {"entry not an object", file_bytes(R"({"a": 3})", ""), "tensor 'a': entry is 3"},
      {"unknown dtype", file_bytes("{" + entry("a", "I8", "[1]", "[0,1]") + "}", "x"),
       "tensor 'a': unsupported dtype \"I8\" (supported: F32, F64, I64, BF16, F16)"},
      {"dtype not a string", file_bytes(R"({"a":{"dtype":4,"shape":[],"data_offsets":[0,4]}})", "xxxx"),
       "dtype 4 is not a string"},
      {"negative dim", file_bytes("{" + entry("a", "F32", "[-1]", "[0,4]") + "}", "xxxx"),
       "shape [-1] must hold non-negative integers"},
      {"float dim", file_bytes("{" + entry("a", "F32", "[1.0]", "[0,4]") + "}", "xxxx"),
       "must hold non-negative integers"},
      {"shape not an array", file_bytes("{" + entry("a", "F32", "1", "[0,4]") + "}", "xxxx"),
       "shape 1 is not an array"},
      {"shape overflow",
       file_bytes("{" + entry("a", "F32", "[4294967296,4294967296,4]", "[0,0]") + "}", ""),
       "overflows"},
      {"three offsets", file_bytes("{" + entry("a", "F32", "[1]", "[0,4,8]") + "}", "xxxx"),
       "data_offsets [0,4,8] must be [begin, end], two non-negative integers"},
      {"negative offset", file_bytes("{" + entry("a", "F32", "[0]", "[-4,-4]") + "}", ""),
       "must be [begin, end]"},
      {"begin > end", file_bytes("{" + entry("a", "F32", "[1]", "[8,4]") + "}", std::string(8, 'x')),
       "tensor 'a': data_offsets [8, 4] has begin > end"},
      {"size mismatch", file_bytes("{" + entry("a", "F32", "[3]", "[0,8]") + "}", std::string(8, 'x')),
       "tensor 'a': data_offsets [0, 8] hold 8 bytes but shape [3] of F32 needs 12"},
      {"overlap",
       file_bytes("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}",
                  std::string(12, 'x')),
       "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]"},
      {"gap",
       file_bytes("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[8,12]") + "}",
                  std::string(12, 'x')),
       "bytes [4, 8] of the data section belong to no tensor"},
      {"trailing data", file_bytes("{" + entry("a", "F32", "[1]", "[0,4]") + "}", std::string(8, 'x')),
       "bytes [4, 8] of the data section belong to no tensor"},
      {"duplicate tensor",
       file_bytes("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("a", "F32", "[1]", "[4,8]") + "}",
                  std::string(8, 'x')),
       "duplicate key 'a' in the header"},
      {"duplicate field", file_bytes(R"({"a":{"dtype":"F32","dtype":"F64","shape":[],"data_offsets":[0,4]}})", "xxxx"),
       "duplicate key 'dtype'"},
      {"missing field", file_bytes(R"({"a":{"dtype":"F32","shape":[]}})", ""),
       "tensor 'a': missing field 'data_offsets'"},
      {"unknown field", file_bytes(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}})", "xxxx"),
       "tensor 'a': unknown field 'x'"},
      {"metadata not an object", file_bytes(R"({"__metadata__":3})", ""), "__metadata__ is 3"},
      {"metadata value not a string", file_bytes(R"({"__metadata__":{"epoch":3}})", ""),
       "__metadata__ 'epoch' is 3, expected a string"},
      {"data section truncated", file_bytes("{" + entry("a", "F64", "[2]", "[0,16]") + "}", std::string(15, 'x')),
       "tensor 'a': data_offsets [0, 16] end past the data section (15 bytes)"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    write_bytes(path, c.bytes);
    REQUIRE_THROWS_AS(nn::load_safetensors(path), nn::SafetensorsError);
    REQUIRE_THROWS_WITH(nn::load_safetensors(path),
                        Contains(path + ": ") && Contains(c.message));
  }

  // The message spelled out in full.
  write_bytes(path, file_bytes("{" + entry("0.weight", "F32", "[1024]", "[0,4096]") + "}",
                               std::string(2048, '\0')));
  REQUIRE_THROWS_WITH(nn::load_safetensors(path),
                      path + ": tensor '0.weight': data_offsets [0, 4096] end past the data "
                             "section (2048 bytes)");

  REQUIRE_THROWS_WITH(nn::load_safetensors(dir + "/missing.safetensors"),
                      Contains("missing.safetensors: cannot open: No such file or directory"));
  REQUIRE_THROWS_WITH(nn::load_safetensors(dir), Contains(dir + ": not a regular file"));
}

TEST_CASE("every truncation and single-byte corruption of a file is caught, never a crash") {
  const std::string dir = test_dir("fuzz");
  const std::string good_path = dir + "/good.safetensors";
  nn::save_safetensors(good_path,
                       {{"w", Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2})},
                        {"n", Tensor::from_vector(std::vector<int64_t>{5}, Shape{})}},
                       {{"k", "v"}});
  const std::string good = read_bytes(good_path);
  const std::string path = dir + "/bad.safetensors";
  for (size_t len = 0; len < good.size(); ++len) {
    INFO("truncated to " << len << " bytes");
    write_bytes(path, good.substr(0, len));
    REQUIRE_THROWS_AS(nn::load_safetensors(path), nn::SafetensorsError);
  }
  // The checksum (Note [Checksum]) catches what parses: a changed data byte, a changed
  // metadata character. What still loads is a file whose checksum key itself was renamed:
  // it reads as a file from another tool, unverified (load_checkpoint refuses those).
  const size_t key_begin = good.find(nn::kChecksumKey);
  const size_t key_end = key_begin + std::string(nn::kChecksumKey).size();
  for (size_t pos = 0; pos < good.size(); ++pos) {
    for (char value : {'\0', '\xff', '"', '9', '{', ' ', '-'}) {
      std::string bytes = good;
      if (bytes[pos] == value) continue;
      bytes[pos] = value;
      write_bytes(path, bytes);
      INFO("byte " << pos << " set to " << int(value));
      if (pos >= key_begin && pos < key_end) {
        bool verified = false;
        try {
          verified = nn::load_safetensors(path).verified;
        } catch (const nn::SafetensorsError&) {
        }
        REQUIRE_FALSE(verified);
        continue;
      }
      REQUIRE_THROWS_AS(nn::load_safetensors(path), nn::SafetensorsError);
      REQUIRE_THROWS_AS(nn::parse_safetensors(bytes, path), nn::SafetensorsError);
    }
  }
}

TEST_CASE("a NUL byte in the header is refused (nlohmann would stop parsing at it)") {
  const std::string path = test_dir("nul") + "/nul.safetensors";
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_bytes(path, file_bytes(header + std::string("\0{\"junk", 6), std::string(4, '\0')));
  REQUIRE_THROWS_WITH(nn::load_safetensors(path),
                      path + ": header has a NUL byte at offset " +
                          std::to_string(header.size()) + " (JSON text cannot contain one)");
}

TEST_CASE("checksum: verified on load, mismatches and malformed values named, key reserved") {
  const std::string dir = test_dir("checksum");
  const std::string path = dir + "/c.safetensors";
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  nn::save_safetensors(path, {{"w", w}}, {{"k", "v"}});
  const std::string good = read_bytes(path);
  nn::SafetensorsFile file = nn::load_safetensors(path);
  REQUIRE(file.verified);
  REQUIRE(file.metadata == std::map<std::string, std::string>{{"k", "v"}});  // key stripped
  nn::SafetensorsFile same = nn::parse_safetensors(good, "mem");
  REQUIRE(same.verified);
  REQUIRE(raw(same.at("w")) == raw(w));

  // Last data byte flipped: parses, but the hash differs.
  std::string flipped = good;
  flipped.back() = static_cast<char>(flipped.back() ^ 0x01);
  write_bytes(path, flipped);
  REQUIRE_THROWS_WITH(nn::load_safetensors(path),
                      Contains(path + ": checksum mismatch: the metadata says crc32:") &&
                          Contains("the contents hash to crc32:"));

  // A checksum value that is not 8 hex digits.
  const size_t at = good.find("crc32:");
  REQUIRE(at != std::string::npos);
  std::string malformed = good;
  malformed[at + 6] = 'X';
  write_bytes(path, malformed);
  REQUIRE_THROWS_WITH(nn::load_safetensors(path),
                      Contains("metadata 'pipewright.crc32' is 'crc32:X") &&
                          Contains("8 lowercase hex digits"));

  // The key cannot be set by the caller.
  REQUIRE_THROWS_WITH(nn::save_safetensors(path, {{"w", w}}, {{nn::kChecksumKey, "x"}}),
                      Contains("reserved for the checksum"));

  // A file from another tool (no checksum) loads, unverified.
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_bytes(path, file_bytes(header, std::string(4, '\0')));
  REQUIRE_FALSE(nn::load_safetensors(path).verified);
}

TEST_CASE("save validates its arguments before touching the disk") {
  const std::string dir = test_dir("save_args");
  const std::string path = dir + "/model.safetensors";
  const Tensor t = Tensor::zeros({2});
  REQUIRE_THROWS_WITH(nn::save_safetensors(path, {{"a", t}, {"a", t}}),
                      Contains("duplicate tensor name 'a'"));
  REQUIRE_THROWS_WITH(nn::save_safetensors(path, {{"__metadata__", t}}), Contains("reserved"));
  REQUIRE_THROWS_WITH(nn::save_safetensors(path, {{"a", Tensor()}}), Contains("'a' is undefined"));
  REQUIRE_THROWS_WITH(nn::save_safetensors(path, {{"bad \xff name", t}}), Contains("UTF-8"));
  REQUIRE_THROWS_AS(nn::save_safetensors(path, {{"a", t}, {"a", t}}), std::invalid_argument);
  REQUIRE(fs::is_empty(dir));
}

TEST_CASE("atomic save: no temporary file left, an old file intact when the save fails") {
  const std::string dir = test_dir("atomic");
  const std::string path = dir + "/model.safetensors";
  const nn::NamedTensors v1 = {{"w", Tensor::full({3}, 1.0)}};
  const nn::NamedTensors v2 = {{"w", Tensor::full({3}, 2.0)}, {"b", Tensor::zeros({1})}};
  nn::save_safetensors(path, v1);
  const std::string old_bytes = read_bytes(path);
  REQUIRE(temp_files(dir).empty());

  SECTION("overwriting replaces the file") {
    nn::save_safetensors(path, v2);
    REQUIRE(nn::load_safetensors(path).tensors.size() == 2);
    REQUIRE(temp_files(dir).empty());
  }
  SECTION("the temporary file cannot be created: the old file is untouched") {
    const std::string blocker = path + ".tmp." + std::to_string(::getpid());
    fs::create_directory(blocker);  // a directory where the temporary file would go
    REQUIRE_THROWS_AS(nn::save_safetensors(path, v2), nn::SafetensorsError);
    REQUIRE_THROWS_WITH(nn::save_safetensors(path, v2),
                        Contains("cannot create the temporary file"));
    REQUIRE(read_bytes(path) == old_bytes);
    REQUIRE(fs::is_directory(blocker));  // not ours: left alone
    fs::remove(blocker);
  }
  SECTION("the path is a directory: the rename fails and the temporary file is removed") {
    const std::string target = dir + "/a_directory";
    fs::create_directory(target);
    REQUIRE_THROWS_WITH(nn::save_safetensors(target, v2),
                        Contains(target + ": cannot rename the temporary file"));
    REQUIRE(fs::is_directory(target));
    REQUIRE(temp_files(dir).empty());
  }
  SECTION("the directory does not exist") {
    REQUIRE_THROWS_WITH(nn::save_safetensors(dir + "/no/such/dir/m.safetensors", v2),
                        Contains("cannot create the temporary file") &&
                            Contains("No such file or directory"));
  }
  REQUIRE(nn::load_safetensors(path).tensors.size() >= 1);
}

// ---- Module and checkpoint helpers (nn/serialize.h) ----

namespace {

nn::Sequential small_model(uint64_t seed) {
  default_generator().set_state(seed, 0);
  return nn::Sequential{nn::Linear(3, 4), nn::BatchNorm1d(4), nn::Linear(4, 2)};
}

// A few SGD steps of cross-entropy on a fixed batch.
void train(nn::Module& model, nn::Optimizer& opt, int steps) {
  Tensor x = Tensor::from_vector(std::vector<float>{0.1f, -0.4f, 0.9f, 1.2f, 0.3f, -0.7f,
                                                    -1.1f, 0.5f, 0.2f, 0.8f, -0.2f, 0.6f},
                                 Shape{4, 3});
  Tensor y = Tensor::from_vector(std::vector<int64_t>{0, 1, 1, 0});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    nn::cross_entropy(model(x), y).backward();
    opt.step();
  }
}

void require_same_state(const nn::NamedTensors& a, const nn::NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(a[i].first == b[i].first);
    REQUIRE(ops::equal(a[i].second, b[i].second));
  }
}

}  // namespace

TEST_CASE("save_state_dict / load_state_dict of a Module") {
  const std::string dir = test_dir("module");
  const std::string path = dir + "/model.safetensors";
  nn::Sequential a = small_model(1);
  nn::SGD opt(a.parameters(), {.lr = 0.1});
  train(a, opt, 2);  // parameters and BatchNorm running statistics move
  nn::save_state_dict(path, a, {{"epoch", "2"}});

  nn::Sequential b = small_model(2);
  REQUIRE_FALSE(ops::equal(a.state_dict()[0].second, b.state_dict()[0].second));
  REQUIRE(nn::load_state_dict(path, b) == std::map<std::string, std::string>{{"epoch", "2"}});
  require_same_state(a.state_dict(), b.state_dict());

  // Keys in the file are the state dict's, in its order.
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  const nn::NamedTensors expected = a.state_dict();
  REQUIRE(file.tensors.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(file.tensors[i].first == expected[i].first);

  nn::Sequential other{nn::Linear(3, 5)};
  REQUIRE_THROWS_AS(nn::load_state_dict(path, other), std::invalid_argument);
}

TEST_CASE("save_checkpoint / load_checkpoint resume training bit for bit") {
  const std::string path = test_dir("checkpoint") + "/ckpt.safetensors";
  for (const bool adam : {false, true}) {
    INFO((adam ? "AdamW" : "SGD"));
    auto make_opt = [&](nn::Module& m, double lr) -> std::unique_ptr<nn::Optimizer> {
      if (adam) return std::make_unique<nn::AdamW>(m.parameters(), nn::AdamWOptions{.lr = lr});
      return std::make_unique<nn::SGD>(m.parameters(),
                                       nn::SGDOptions{.lr = lr, .momentum = 0.9});
    };
    nn::Sequential a = small_model(1);
    auto opt_a = make_opt(a, 0.05);
    train(a, *opt_a, 3);
    nn::save_checkpoint(path, a, *opt_a, {{"step", "3"}});

    nn::Sequential b = small_model(7);
    auto opt_b = make_opt(b, 0.5);  // the checkpoint restores lr too
    REQUIRE(nn::load_checkpoint(path, b, *opt_b) ==
            std::map<std::string, std::string>{{"step", "3"}});
    REQUIRE(opt_b->lr() == 0.05);

    train(a, *opt_a, 3);
    train(b, *opt_b, 3);
    require_same_state(a.state_dict(), b.state_dict());
    require_same_state(opt_a->state_dict(), opt_b->state_dict());
  }

  // A plain state dict is not a checkpoint.
  nn::Sequential m = small_model(1);
  nn::SGD opt(m.parameters(), {.lr = 0.1});
  nn::save_state_dict(path, m);
  REQUIRE(nn::load_safetensors(path).verified);
  REQUIRE_THROWS_WITH(nn::load_checkpoint(path, m, opt),
                      Contains("neither under 'model.' nor under 'optimizer.'"));
}

TEST_CASE("a checkpoint keeps the optimizer state by parameter name: any parameter order loads") {
  const std::string path = test_dir("checkpoint_names") + "/ckpt.safetensors";
  nn::Sequential a = small_model(1);
  nn::AdamW opt_a(nn::weight_decay_groups(a.parameters(), 0.1), {.lr = 0.05});
  train(a, opt_a, 2);
  nn::save_checkpoint(path, a, opt_a);
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  const std::string first = a.named_parameters().front().first;  // "0.weight"
  REQUIRE_NOTHROW(file.at("optimizer.state." + first + ".exp_avg"));

  // Another optimizer over the same model, its parameters in reverse order, continues alike.
  nn::Sequential b = small_model(7);
  nn::Tensors reversed = b.parameters();
  std::reverse(reversed.begin(), reversed.end());
  nn::AdamW opt_b(nn::weight_decay_groups(reversed, 0.1), {.lr = 0.5});
  nn::load_checkpoint(path, b, opt_b);
  train(a, opt_a, 2);
  train(b, opt_b, 2);
  require_same_state(a.state_dict(), b.state_dict());

  // An older file numbering the state by index loads into an optimizer in the saved order.
  nn::Sequential c = small_model(3);
  nn::AdamW opt_c(nn::weight_decay_groups(c.parameters(), 0.1), {.lr = 0.5});
  nn::NamedTensors by_index;
  for (auto& [key, t] : a.state_dict()) by_index.emplace_back("model." + key, t);
  for (auto& [key, t] : opt_a.state_dict()) by_index.emplace_back("optimizer." + key, t);
  nn::load_checkpoint_tensors(by_index, c, opt_c, "test");
  require_same_state(opt_a.state_dict(), opt_c.state_dict());
}

TEST_CASE("a truncated or bit-flipped checkpoint is refused naming the file, model untouched") {
  const std::string dir = test_dir("ckpt_corrupt");
  const std::string path = dir + "/ckpt.safetensors";
  nn::Sequential a = small_model(1);
  nn::SGD opt_a(a.parameters(), {.lr = 0.05, .momentum = 0.9});
  train(a, opt_a, 2);
  nn::save_checkpoint(path, a, opt_a, {{"epoch", "2"}});
  const std::string good = read_bytes(path);

  nn::Sequential b = small_model(7);
  nn::SGD opt_b(b.parameters(), {.lr = 0.5, .momentum = 0.9});
  nn::NamedTensors before;  // copies: the state dict's tensors are the model's own
  for (const auto& [name, t] : b.state_dict()) before.emplace_back(name, t.clone());
  auto require_untouched = [&] {
    REQUIRE(bitwise_equal(b.state_dict(), before));
    REQUIRE(opt_b.lr() == 0.5);
  };

  // Every truncation (a step of 7 bytes keeps the test quick; the ends are included).
  for (size_t len = 0; len < good.size(); len += (len + 7 < good.size() ? 7 : 1)) {
    INFO("truncated to " << len << " of " << good.size() << " bytes");
    write_bytes(path, good.substr(0, len));
    REQUIRE_THROWS_WITH(nn::load_checkpoint(path, b, opt_b), Contains(path + ": "));
    require_untouched();
  }
  // A single flipped bit anywhere, one bit position per byte (cycling).
  int refused = 0;
  for (size_t pos = 0; pos < good.size(); ++pos) {
    std::string bytes = good;
    bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (pos % 8)));
    write_bytes(path, bytes);
    INFO("bit " << pos % 8 << " of byte " << pos << " flipped");
    try {
      nn::load_checkpoint(path, b, opt_b);
      FAIL("a bit-flipped checkpoint loaded");
    } catch (const nn::SafetensorsError& e) {
      REQUIRE_THAT(e.what(), Contains(path + ": "));
      ++refused;
    }
    require_untouched();
  }
  REQUIRE(refused == static_cast<int>(good.size()));

  // A file with no checksum is not a checkpoint.
  const std::string header = R"({"model.0.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  write_bytes(path, file_bytes(header, std::string(4, '\0')));
  REQUIRE_THROWS_WITH(nn::load_checkpoint(path, b, opt_b),
                      Contains(path + ": no checksum") && Contains("save_checkpoint"));
  require_untouched();
}
