#include "examples/fashion_mnist_autoencoder/autoencoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "autograd/grad_mode.h"
#include "data/fashion_mnist.h"
#include "examples/common/progress.h"
#include "examples/fashion_mnist/skip_layers.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pipewright::examples {
namespace {

constexpr int64_t kEvalBatch = 1000;

std::string level_name(size_t level) { return "e" + std::to_string(level); }

// SplitMix64's finaliser (Steele, Lea, Flood 2014): one well-mixed seed per (seed, step).
uint64_t mix(uint64_t seed, uint64_t step) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (step + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

nn::Sequential build_autoencoder(const AutoencoderOptions& options, uint64_t seed) {
  const std::vector<int64_t>& w = options.widths;
  if (w.size() < 2) {
    throw std::invalid_argument("--widths: got " + std::to_string(w.size()) +
                                " widths, need at least 2 (an encoder level and the bottleneck)");
  }
  for (int64_t width : w) {
    if (width < 1) {
      throw std::invalid_argument("--widths " + std::to_string(width) + ": must be at least 1");
    }
  }
  if (!(options.noise >= 0)) {
    throw std::invalid_argument("--noise " + std::to_string(options.noise) + ": must be >= 0");
  }
  Generator init(seed);
  GeneratorGuard guard(init);
  nn::Sequential model;
  const size_t k = w.size();
  int64_t in = data::kFashionMnistPixels;
  for (size_t level = 1; level <= k; ++level) {  // encoder, then the bottleneck
    model.push_back(nn::Linear(in, w[level - 1]));
    model.push_back(nn::BatchNorm1d(w[level - 1]));
    model.push_back(nn::ReLU());
    if (level < k) model.push_back(Stash(level_name(level)));
    in = w[level - 1];
  }
  for (size_t level = k - 1; level >= 1; --level) {  // decoder
    model.push_back(nn::Linear(in, w[level - 1]));
    model.push_back(AddStashed(level_name(level)));
    model.push_back(nn::BatchNorm1d(w[level - 1]));
    model.push_back(nn::ReLU());
    in = w[level - 1];
  }
  model.push_back(nn::Linear(in, data::kFashionMnistPixels));
  return model;
}

std::vector<int> unet_balance(const AutoencoderOptions& options) {
  const int levels = static_cast<int>(options.widths.size()) - 1;  // encoder = decoder levels
  // Encoder levels have 4 children, the bottleneck 3, decoder levels 4, the output 1.
  return {4 * levels, 3 + 4, 4 * (levels - 1) + 1};
}

Tensor add_noise(const Tensor& clean, double std, uint64_t seed) {
  Tensor noise = Tensor::empty(clean.shape(), {.dtype = clean.dtype(), .device = clean.device()});
  Generator generator(seed);
  generator.normal_(noise, 0.0, std);
  return ops::add(clean, noise);
}

Tensor noisy_test_images(const Tensor& clean, double noise) {
  return add_noise(clean, noise, kTestNoiseSeed);
}

double mean_squared_error(const Tensor& a, const Tensor& b) {
  const Tensor a64 = a.to(DType::kFloat64), b64 = b.to(a64.device()).to(DType::kFloat64);
  return nn::mse_loss(a64, b64).item();
}

Task autoencoder_task(const AutoencoderOptions& options) {
  Task task;
  task.build_model = [options](const TrainConfig& c) { return build_autoencoder(options, c.seed); };
  task.images = {.mean = 0.0, .std = 1.0};  // pixels in [0, 1]
  task.make_step = [options](const TrainConfig& c, const data::Batch& batch, int64_t step) {
    const uint64_t seed = mix(c.seed, static_cast<uint64_t>(step));
    return std::pair(add_noise(batch.inputs, options.noise, seed), batch.inputs);
  };
  task.loss = [](const Tensor& output, const Tensor& clean) { return nn::mse_loss(output, clean); };
  task.loss_name = "mse";
  task.evaluate = [options](pipeline::Pipe& pipe, const data::Dataset& test, EpochStats& stats) {
    const Tensor noisy = noisy_test_images(test.inputs(), options.noise);
    double sum = 0;
    for (int64_t start = 0; start < test.size(); start += kEvalBatch) {
      const int64_t end = std::min(test.size(), start + kEvalBatch);
      const Tensor output = pipe.forward(noisy.slice(start, end));
      const Tensor clean = test.inputs().slice(start, end).to(output.device());
      sum += nn::mse_loss(output, clean, nn::Reduction::kSum).item();
    }
    stats.test_loss = sum / static_cast<double>(test.inputs().numel());
    return "test mse " + format_fixed(stats.test_loss, 4) + " (identity " +
           format_fixed(mean_squared_error(noisy, test.inputs()), 4) + ")";
  };
  task.describe = describe_skips;
  return task;
}

Reconstructions reconstruct_per_class(const AutoencoderOptions& options,
                                      const nn::NamedTensors& state, const data::Dataset& test) {
  nn::Sequential model = build_autoencoder(options, 0);
  model.load_state_dict(state);
  model.eval();
  const std::vector<int64_t> labels = test.targets().to(Device::cpu(0)).to_vector<int64_t>();
  Reconstructions r;
  std::vector<int64_t> rows;
  for (int64_t c = 0; c < data::kFashionMnistNumClasses; ++c) {
    auto it = std::find(labels.begin(), labels.end(), c);
    if (it == labels.end()) continue;
    r.classes.push_back(c);
    rows.push_back(it - labels.begin());
  }
  const Tensor clean = test.inputs().to(Device::cpu(0));
  r.clean = ops::index_select(clean, Tensor::from_vector(rows));
  // The same noise as the test set's rows got (noisy_test_images draws for every row).
  r.noisy = ops::index_select(noisy_test_images(clean, options.noise), Tensor::from_vector(rows));
  autograd::NoGradGuard no_grad;
  r.output = model.forward(r.noisy);
  return r;
}

}  // namespace pipewright::examples
