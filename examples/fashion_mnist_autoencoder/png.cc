#include "examples/fashion_mnist_autoencoder/png.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "data/fashion_mnist.h"

namespace pipewright::examples {
namespace {

constexpr int kSide = static_cast<int>(data::kFashionMnistImageSide);

std::string shape_text(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

}  // namespace

int grid_extent(int images) { return images * (kSide * kGridScale + kGridGap) + kGridGap; }

GreyImage image_grid(const std::vector<Tensor>& columns) {
  if (columns.empty()) throw std::invalid_argument("image_grid: no columns");
  const int64_t rows = columns[0].dim() == 2 ? columns[0].size(0) : -1;
  for (size_t c = 0; c < columns.size(); ++c) {
    const Tensor& t = columns[c];
    if (t.dim() != 2 || t.size(0) != rows || t.size(1) != data::kFashionMnistPixels) {
      throw std::invalid_argument("image_grid: column " + std::to_string(c) + " is " +
                                  shape_text(t) + ", expected [" + std::to_string(rows) +
                                  ", 784] like column 0");
    }
  }
  GreyImage grid;
  grid.width = grid_extent(static_cast<int>(columns.size()));
  grid.height = grid_extent(static_cast<int>(rows));
  grid.pixels.assign(static_cast<size_t>(grid.width) * grid.height, kGridBackground);
  for (size_t c = 0; c < columns.size(); ++c) {
    const std::vector<float> values =
        columns[c].to(Device::cpu(0)).to(DType::kFloat32).contiguous().to_vector<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const int x0 = kGridGap + static_cast<int>(c) * (kSide * kGridScale + kGridGap);
      const int y0 = kGridGap + static_cast<int>(r) * (kSide * kGridScale + kGridGap);
      for (int y = 0; y < kSide * kGridScale; ++y) {
        for (int x = 0; x < kSide * kGridScale; ++x) {
          const float v =
              values[r * data::kFashionMnistPixels + (y / kGridScale) * kSide + x / kGridScale];
          const float clamped = std::clamp(std::isnan(v) ? 0.0f : v, 0.0f, 1.0f);
          grid.pixels[static_cast<size_t>(y0 + y) * grid.width + x0 + x] =
              static_cast<uint8_t>(std::lround(clamped * 255.0f));
        }
      }
    }
  }
  return grid;
}

void write_png(const std::string& path, const GreyImage& image) {
  if (image.width < 1 || image.height < 1 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height) {
    throw std::invalid_argument("write_png " + path + ": " + std::to_string(image.pixels.size()) +
                                " pixels for a " + std::to_string(image.width) + " x " +
                                std::to_string(image.height) + " image");
  }
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_GRAY;
  if (!png_image_write_to_file(&png, path.c_str(), 0, image.pixels.data(), image.width, nullptr)) {
    const std::string message = png.message;
    png_image_free(&png);
    throw std::runtime_error("cannot write " + path + ": " + message);
  }
}

GreyImage read_png(const std::string& path) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&png, path.c_str())) {
    const std::string message = png.message;
    png_image_free(&png);
    throw std::runtime_error("cannot read " + path + ": " + message);
  }
  png.format = PNG_FORMAT_GRAY;
  GreyImage image;
  image.width = static_cast<int>(png.width);
  image.height = static_cast<int>(png.height);
  image.pixels.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.pixels.data(), 0, nullptr)) {
    const std::string message = png.message;
    png_image_free(&png);
    throw std::runtime_error("cannot read " + path + ": " + message);
  }
  return image;
}

}  // namespace pipewright::examples
