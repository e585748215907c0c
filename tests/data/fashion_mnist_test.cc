// Fashion-MNIST loader: on small directories the test writes itself, then on the real files
// that Debian's dataset-fashion-mnist installs.
#include "data/fashion_mnist.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "data/idx.h"
#include "tests/data/idx_writer.h"

namespace pipewright::data {
namespace {

using Catch::Contains;
using testing::idx_bytes;
using testing::write_file;

// A directory with `images` 28x28 images (pixel j of image i = (i + j) % 256) and `labels`
// labels (i % 10), named like the `prefix` ("train"/"t10k") split; gzip or plain.
std::string write_split(const std::string& prefix, uint32_t images, uint32_t labels,
                        bool gzip = true, std::string dir = "") {
  if (dir.empty()) dir = testing::make_temp_dir();
  std::vector<uint8_t> pixels;
  for (uint32_t i = 0; i < images; ++i)
    for (int j = 0; j < 784; ++j) pixels.push_back(static_cast<uint8_t>((i + j) % 256));
  std::vector<uint8_t> ys;
  for (uint32_t i = 0; i < labels; ++i) ys.push_back(static_cast<uint8_t>(i % 10));
  const std::string ext = gzip ? ".gz" : "";
  write_file(dir + "/" + prefix + "-images-idx3-ubyte" + ext,
             idx_bytes(kIdxMagicImages, {images, 28, 28}, pixels), gzip);
  write_file(dir + "/" + prefix + "-labels-idx1-ubyte" + ext,
             idx_bytes(kIdxMagicLabels, {labels}, ys), gzip);
  return dir;
}

TEST_CASE("load_fashion_mnist converts pixels and labels") {
  const std::string dir = write_split("train", 3, 3);
  const Dataset raw = load_fashion_mnist(dir, Split::kTrain, {.mean = 0.0, .std = 1.0});
  REQUIRE(raw.size() == 3);
  REQUIRE(raw.inputs().shape() == Shape{3, 784});
  REQUIRE(raw.inputs().dtype() == DType::kFloat32);
  REQUIRE(raw.targets().shape() == Shape{3});
  REQUIRE(raw.targets().dtype() == DType::kInt64);
  REQUIRE(raw.targets().to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  const float* x = raw.inputs().data<float>();
  CHECK(x[0] == 0.0f);                                          // image 0, pixel 0
  CHECK(x[784 + 254] == Approx(255.0 / 255.0));                 // image 1, pixel 254 = 255
  CHECK(x[2 * 784 + 10] == Approx(12.0 / 255.0));              // image 2, pixel 10 = 12

  const Dataset norm = load_fashion_mnist(dir, Split::kTrain);  // default mean/std
  const float* z = norm.inputs().data<float>();
  CHECK(z[0] == Approx((0.0 - 0.2860) / 0.3530));
  CHECK(z[2 * 784 + 10] == Approx((12.0 / 255.0 - 0.2860) / 0.3530));
}

TEST_CASE("load_fashion_mnist limit keeps the first samples") {
  const std::string dir = write_split("train", 5, 5);
  const Dataset two = load_fashion_mnist(dir, Split::kTrain, {.limit = 2});
  REQUIRE(two.inputs().shape() == Shape{2, 784});
  REQUIRE(two.targets().to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  REQUIRE(load_fashion_mnist(dir, Split::kTrain, {.limit = 50}).size() == 5);
  REQUIRE(load_fashion_mnist(dir, Split::kTrain, {.limit = 0}).size() == 0);
  REQUIRE_THROWS_AS(load_fashion_mnist(dir, Split::kTrain, {.limit = -1}), std::invalid_argument);
  REQUIRE_THROWS_AS(load_fashion_mnist(dir, Split::kTrain, {.std = 0.0}), std::invalid_argument);
}

TEST_CASE("load_fashion_mnist reads the test split, and uncompressed files") {
  const std::string dir = write_split("t10k", 4, 4, /*gzip=*/false);
  REQUIRE(load_fashion_mnist(dir, Split::kTest).size() == 4);
  REQUIRE_THROWS_WITH(load_fashion_mnist(dir, Split::kTrain),
                      Contains(dir + "/train-images-idx3-ubyte.gz") &&
                          Contains("apt-get install dataset-fashion-mnist"));
}

TEST_CASE("load_fashion_mnist rejects image and label counts that differ") {
  const std::string dir = write_split("train", 3, 2);
  REQUIRE_THROWS_WITH(load_fashion_mnist(dir, Split::kTrain),
                      Contains("counts differ") && Contains("train-images-idx3-ubyte.gz has 3") &&
                          Contains("train-labels-idx1-ubyte.gz has 2"));
  REQUIRE_THROWS_AS(load_fashion_mnist(dir, Split::kTrain), IdxError);
}

TEST_CASE("load_fashion_mnist rejects images that are not 28x28") {
  const std::string dir = write_split("train", 2, 2);
  const std::string images = dir + "/train-images-idx3-ubyte.gz";
  write_file(images, idx_bytes(kIdxMagicImages, {2, 27, 28}, std::vector<uint8_t>(2 * 27 * 28)),
             true);
  REQUIRE_THROWS_WITH(load_fashion_mnist(dir, Split::kTrain),
                      Contains(images) && Contains("27x28, expected 28x28"));
}

TEST_CASE("load_fashion_mnist: a missing directory or file says how to install the data") {
  const std::string missing = testing::make_temp_dir() + "/no-such-dir";
  REQUIRE_THROWS_WITH(load_fashion_mnist(missing),
                      Contains(missing) &&
                          Contains("install Debian's dataset-fashion-mnist (apt-get install "
                                   "dataset-fashion-mnist) or pass --data-dir"));
  const std::string empty = testing::make_temp_dir();
  REQUIRE_THROWS_WITH(load_fashion_mnist(empty, Split::kTest),
                      Contains(empty + "/t10k-images-idx3-ubyte.gz") && Contains("--data-dir"));
  REQUIRE_THROWS_AS(load_fashion_mnist(missing), std::runtime_error);
}

// ---- the real dataset (CI installs Debian's dataset-fashion-mnist through tools/bazel) ----

constexpr char kNoRealData[] =
    "/usr/share/datasets/fashion-mnist is missing: install Debian's dataset-fashion-mnist "
    "(tools/bazel does) to run this test";

TEST_CASE("real Fashion-MNIST test split: shapes, labels, normalisation") {
  INFO(kNoRealData);
  REQUIRE(std::filesystem::is_directory(kDefaultFashionMnistDir));
  const Dataset ds = load_fashion_mnist(kDefaultFashionMnistDir, Split::kTest, {.limit = 500});
  REQUIRE(ds.inputs().shape() == Shape{500, 784});
  REQUIRE(ds.targets().shape() == Shape{500});
  const std::vector<int64_t> y = ds.targets().to_vector<int64_t>();
  std::vector<int> per_class(10, 0);
  for (int64_t label : y) {
    REQUIRE(label >= 0);
    REQUIRE(label < 10);
    ++per_class[static_cast<size_t>(label)];
  }
  for (int count : per_class) CHECK(count > 0);  // 500 samples cover all 10 classes

  // Normalised with the training set's mean/std: the test images' mean is near 0, std near 1.
  const std::vector<float> x = ds.inputs().to_vector<float>();
  double sum = 0, sum_sq = 0;
  for (float v : x) {
    sum += v;
    sum_sq += double{v} * v;
  }
  const double mean = sum / x.size();
  const double std = std::sqrt(sum_sq / x.size() - mean * mean);
  CHECK(std::abs(mean) < 0.1);
  CHECK(std::abs(std - 1.0) < 0.1);
  CHECK(*std::min_element(x.begin(), x.end()) == Approx(-0.2860 / 0.3530));  // pixel 0
}

TEST_CASE("real Fashion-MNIST: full splits have 60000 / 10000 balanced samples") {
  INFO(kNoRealData);
  REQUIRE(std::filesystem::is_directory(kDefaultFashionMnistDir));
  const Split split = GENERATE(Split::kTrain, Split::kTest);
  const int64_t expected = split == Split::kTrain ? 60000 : 10000;
  const Dataset ds = load_fashion_mnist(kDefaultFashionMnistDir, split);
  REQUIRE(ds.size() == expected);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t label : ds.targets().to_vector<int64_t>()) ++per_class[static_cast<size_t>(label)];
  REQUIRE(per_class == std::vector<int64_t>(10, expected / 10));  // the dataset is balanced
}

}  // namespace
}  // namespace pipewright::data
