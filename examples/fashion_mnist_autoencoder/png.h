// Grey-scale PNG files through libpng's simplified API (png_image), and the grid of images the
// autoencoder example writes.
//
//   GreyImage grid = image_grid({noisy, output, clean});   // columns; [rows, 784] each
//   write_png(path, grid);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::examples {

/// 8-bit grey pixels, row-major: pixels[y * width + x], 0 black, 255 white.
struct GreyImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

/// Each Fashion-MNIST image is drawn kGridScale x kGridScale times larger, with kGridGap
/// pixels of mid-grey between images and around the grid.
inline constexpr int kGridScale = 2;
inline constexpr int kGridGap = 2;
inline constexpr uint8_t kGridBackground = 128;

/// The grid's width or height in pixels for `images` 28-pixel images side by side.
int grid_extent(int images);

/// Column c of the grid shows the rows of columns[c] (float [R, 784], any device, values
/// clamped to [0, 1] and scaled to 0..255), one image per grid row; so the grid is
/// grid_extent(columns.size()) wide and grid_extent(R) high. Throws std::invalid_argument when
/// there are no columns, or a column is not [R, 784] with the first column's R (naming
/// shapes).
GreyImage image_grid(const std::vector<Tensor>& columns);

/// Writes `image` as an 8-bit grey PNG. Throws std::runtime_error naming the path and libpng's
/// message when it cannot be written, std::invalid_argument when pixels.size() is not
/// width x height.
void write_png(const std::string& path, const GreyImage& image);

/// Reads a PNG (any format libpng reads, converted to 8-bit grey). Throws std::runtime_error
/// naming the path and libpng's message.
GreyImage read_png(const std::string& path);

}  // namespace pipewright::examples
