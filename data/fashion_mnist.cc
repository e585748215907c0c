#include "data/fashion_mnist.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "data/idx.h"

namespace pipewright::data {
namespace {

namespace fs = std::filesystem;

constexpr char kInstallHint[] =
    "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass "
    "--data-dir";

// dir/name.gz if present, else dir/name; throws the install hint when neither exists.
std::string find_file(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  const fs::path gz = dir / (name + ".gz");
  if (fs::exists(gz, ec)) return gz.string();
  const fs::path plain = dir / name;
  if (fs::exists(plain, ec)) return plain.string();
  throw std::runtime_error("Fashion-MNIST file not found: " + gz.string() + " (nor " +
                           plain.string() + "); " + kInstallHint);
}

}  // namespace

const char* split_name(Split split) { return split == Split::kTrain ? "train" : "test"; }

Dataset load_fashion_mnist(const std::string& dir, Split split, const FashionMnistOptions& options) {
  if (!(options.std > 0)) {
    throw std::invalid_argument("load_fashion_mnist: std must be > 0, got " +
                                std::to_string(options.std));
  }
  if (options.limit && *options.limit < 0) {
    throw std::invalid_argument("load_fashion_mnist: limit must be >= 0, got " +
                                std::to_string(*options.limit));
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw std::runtime_error("Fashion-MNIST directory not found: " + dir + "; " + kInstallHint);
  }

  // 1. Read and check the two files.
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  const IdxArray images = read_idx_images(images_path);
  const IdxArray labels = read_idx_labels(labels_path, kFashionMnistNumClasses);
  if (images.dims[1] != kFashionMnistImageSide || images.dims[2] != kFashionMnistImageSide) {
    throw IdxError(images_path + ": images are " + std::to_string(images.dims[1]) + "x" +
                   std::to_string(images.dims[2]) + ", expected 28x28");
  }
  if (images.dims[0] != labels.dims[0]) {
    throw IdxError("Fashion-MNIST image and label counts differ: " + images_path + " has " +
                   std::to_string(images.dims[0]) + " images, " + labels_path + " has " +
                   std::to_string(labels.dims[0]) + " labels");
  }
  const int64_t n = std::min(images.dims[0], options.limit.value_or(images.dims[0]));

  // 2. Convert: pixels to normalised float32 [n, 784], labels to int64 [n].
  Tensor inputs = Tensor::empty({n, kFashionMnistPixels}, {.dtype = DType::kFloat32});
  float* x = inputs.data<float>();
  const double scale = 1.0 / (255.0 * options.std);  // x = pixel * scale + shift
  const double shift = -options.mean / options.std;
  for (int64_t i = 0; i < n * kFashionMnistPixels; ++i) {
    x[i] = static_cast<float>(images.bytes[static_cast<size_t>(i)] * scale + shift);
  }
  Tensor targets = Tensor::empty({n}, {.dtype = DType::kInt64});
  int64_t* y = targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) y[i] = labels.bytes[static_cast<size_t>(i)];
  return Dataset(std::move(inputs), std::move(targets));
}

}  // namespace pipewright::data
