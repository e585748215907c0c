// End-to-end: the denoising-autoencoder example (examples/fashion_mnist_autoencoder) on a
// slice of the real data: it learns to denoise (test MSE far below the identity map's), its
// U-Net skips cross stages, and the PNG grid it writes reads back with the right size and
// the right images in it.
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "data/fashion_mnist.h"
#include "examples/fashion_mnist_autoencoder/autoencoder.h"
#include "examples/fashion_mnist_autoencoder/png.h"
#include "pipeline/skip_layout.h"
#include "tensor/ops.h"

using namespace pipewright;
using pipewright::examples::AutoencoderOptions;
using pipewright::examples::TrainConfig;

namespace {

const AutoencoderOptions kSmall{.widths = {64, 32, 16}, .noise = 0.5};

// 40 steps of 50 images: enough for BatchNorm's running statistics (momentum 0.1), which the
// test MSE is computed with, to settle.
TrainConfig small_config() {
  TrainConfig c;
  c.epochs = 1;
  c.batch_size = 50;
  c.workers = 3;
  c.balance = examples::unet_balance(kSmall);
  c.chunks = 4;
  c.lr = 3e-3;
  c.dropout = 0;
  c.train_limit = 2000;
  c.test_limit = 200;
  c.progress = false;
  c.seed = 9;
  return c;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

data::Dataset test_images(int64_t limit) {
  return data::load_fashion_mnist(data::kDefaultFashionMnistDir, data::Split::kTest,
                                  {.mean = 0.0, .std = 1.0, .limit = limit});
}

// Mean squared difference, in 0..255 grey levels scaled back to [0, 1], between two tiles
// (column, row) of a grid.
double tile_mse(const examples::GreyImage& grid, int col_a, int col_b, int row) {
  const int tile = 28 * examples::kGridScale + examples::kGridGap;
  double sum = 0;
  for (int y = 0; y < 28 * examples::kGridScale; ++y) {
    for (int x = 0; x < 28 * examples::kGridScale; ++x) {
      const int py = examples::kGridGap + row * tile + y;
      const auto at = [&](int col) {
        return grid.pixels[py * grid.width + examples::kGridGap + col * tile + x] / 255.0;
      };
      sum += (at(col_a) - at(col_b)) * (at(col_a) - at(col_b));
    }
  }
  return sum / (28.0 * 28.0 * examples::kGridScale * examples::kGridScale);
}

}  // namespace

TEST_CASE("the default cut sends e1 from stage 0 past stage 1 to stage 2, and e2 to stage 1") {
  nn::Sequential model = examples::build_autoencoder(kSmall, 0);
  const std::vector<int> balance = examples::unet_balance(kSmall);
  CHECK(balance == std::vector<int>{8, 7, 5});
  const pipeline::SkipLayout layout(model, balance);
  REQUIRE(layout.routes().size() == 2);
  for (const pipeline::SkipRoute& route : layout.routes()) {
    INFO(route.str());
    CHECK(route.stash_stage == 0);
    CHECK(route.pop_stage == (route.key.name == "e1" ? 2 : 1));
  }
  CHECK_THROWS_WITH(examples::build_autoencoder({.widths = {64}}, 0),
                    Catch::Contains("got 1 widths"));
}

TEST_CASE("the noise is fixed by its seed, the same for the first rows whatever the count") {
  const data::Dataset test = test_images(100);
  const Tensor all = examples::noisy_test_images(test.inputs(), 0.5);
  const Tensor first = examples::noisy_test_images(test.inputs().slice(0, 10), 0.5);
  CHECK(ops::equal(all.slice(0, 10), first));
  CHECK_FALSE(ops::equal(examples::add_noise(test.inputs(), 0.5, 1), all));
  // The identity map's MSE is the noise variance: 0.25 over 78,400 pixels (±1 %).
  CHECK(examples::mean_squared_error(all, test.inputs()) == Approx(0.25).epsilon(0.01));
}

TEST_CASE("one epoch on a slice of Fashion-MNIST denoises: test MSE under half the identity's") {
  std::ostringstream log;
  const auto result = examples::train(small_config(), log, examples::autoencoder_task(kSmall));
  INFO(log.str());
  REQUIRE(result.epochs.size() == 1);
  const auto& e = result.epochs[0];
  REQUIRE(e.step_losses.size() == 40);
  CHECK(e.step_losses.back() < 0.5 * e.step_losses.front());
  const data::Dataset test = test_images(200);
  const double identity =
      examples::mean_squared_error(examples::noisy_test_images(test.inputs(), 0.5), test.inputs());
  CHECK(e.test_loss > 0);
  CHECK(e.test_loss < 0.5 * identity);
  CHECK(log.str().find("train mse") != std::string::npos);
  CHECK(log.str().find("skip 'e1' from stage 0 (child 3, Stash(e1)) to stage 2") !=
        std::string::npos);

  // The grid: a row per class, noisy | output | clean.
  const examples::Reconstructions r =
      examples::reconstruct_per_class(kSmall, result.final_state, test);
  REQUIRE(r.classes.size() == 10);  // the first 200 test images hold every class
  const std::string path = temp_path("autoencoder_grid.png");
  examples::write_png(path, examples::image_grid({r.noisy, r.output, r.clean}));
  const examples::GreyImage grid = examples::read_png(path);
  CHECK(grid.width == examples::grid_extent(3));
  CHECK(grid.height == examples::grid_extent(10));
  REQUIRE(grid.pixels.size() == static_cast<size_t>(grid.width * grid.height));
  CHECK(grid.pixels[0] == examples::kGridBackground);
  // The clean column holds the images as they are: its first tile's top-left pixel block is
  // image 0's pixel (0, 0), here the row of class 0.
  const std::vector<float> clean0 = r.clean.slice(0, 1).contiguous().to_vector<float>();
  const int x = examples::kGridGap + 2 * (28 * examples::kGridScale + examples::kGridGap) +
                14 * examples::kGridScale;
  const int y = examples::kGridGap + 14 * examples::kGridScale;
  CHECK(grid.pixels[y * grid.width + x] ==
        static_cast<int>(std::lround(clean0[14 * 28 + 14] * 255)));
  // And the output column is a reconstruction: closer to the clean images than the noisy
  // column is (noisy pixels are clamped to [0, 1] in the PNG, which hides half the noise).
  for (int row = 0; row < 10; ++row) {
    INFO("row " << row);
    CHECK(tile_mse(grid, 1, 2, row) < tile_mse(grid, 0, 2, row));
  }
  CHECK_THROWS_WITH(examples::write_png("/nonexistent/dir/grid.png", grid),
                    Catch::Contains("/nonexistent/dir/grid.png"));
}
