// Fashion-MNIST (Xiao, Rasul, Vollgraf 2017, https://github.com/zalandoresearch/fashion-mnist):
// 28x28 grey-scale images of clothing in 10 classes, 60,000 for training and 10,000 for test,
// stored in the IDX format of MNIST (data/idx.h).
//
// Where the files come from: Debian's package dataset-fashion-mnist installs them at
// kDefaultFashionMnistDir (`tools/bazel` installs the package). A directory holds
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz     (Split::kTrain)
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz      (Split::kTest)
// (uncompressed files without .gz are used when the .gz ones are absent).
//
// What load_fashion_mnist returns:
//   inputs  float32 [N, 784]  row-major pixels, x = (pixel / 255 - mean) / std
//   targets int64   [N]       class index in [0, 10), see kFashionMnistClassNames
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "data/dataset.h"

namespace pipewright::data {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

inline constexpr int64_t kFashionMnistImageSide = 28;  // rows = cols = 28
inline constexpr int64_t kFashionMnistPixels = 784;    // 28 * 28
inline constexpr int kFashionMnistNumClasses = 10;

/// Label i's name (the dataset's own README).
inline constexpr std::array<const char*, kFashionMnistNumClasses> kFashionMnistClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

enum class Split { kTrain, kTest };

/// "train" / "test".
const char* split_name(Split split);

struct FashionMnistOptions {
  /// Normalisation after scaling pixels to [0, 1]: x = (pixel / 255 - mean) / std. The
  /// defaults are Fashion-MNIST's usual training-set statistics; mean 0, std 1 keeps [0, 1].
  double mean = 0.2860;
  double std = 0.3530;
  /// Keep only the first `limit` samples (all of them when the files have fewer); for fast
  /// tests. The whole files are still read and validated.
  std::optional<int64_t> limit = std::nullopt;
};

/// The "train" or "test" split from `dir`, as Dataset{inputs float32 [N, 784], targets int64 [N]}
/// on the CPU, N = 60000 / 10000 (or min(limit, N)).
/// Throws:
///  - std::runtime_error when `dir` or one of the two files is missing; the message names the
///    path and says "install Debian's dataset-fashion-mnist (apt-get install
///    dataset-fashion-mnist) or pass --data-dir";
///  - IdxError (a std::runtime_error) for a malformed file (see data/idx.h), images that are not
///    28x28, a label outside [0, 10), or image and label files with different sample counts
///    (naming both paths and counts);
///  - std::invalid_argument for options.std <= 0 or a negative limit.
Dataset load_fashion_mnist(const std::string& dir = kDefaultFashionMnistDir,
                           Split split = Split::kTrain, const FashionMnistOptions& options = {});

}  // namespace pipewright::data
