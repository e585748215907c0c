#include "examples/fashion_mnist_resnet/resnet.h"

#include <stdexcept>
#include <string>

#include "data/fashion_mnist.h"
#include "examples/fashion_mnist/skip_layers.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/skip.h"
#include "tensor/generator.h"

namespace pipewright::examples {

int64_t resnet_block_size(const ResNetOptions& options) { return options.dropout > 0 ? 9 : 8; }

nn::Sequential build_resnet(const ResNetOptions& options, uint64_t seed) {
  if (options.width < 1) {
    throw std::invalid_argument("--width " + std::to_string(options.width) +
                                ": must be at least 1");
  }
  if (options.blocks < 0) {
    throw std::invalid_argument("--blocks " + std::to_string(options.blocks) + ": must be >= 0");
  }
  if (options.dropout < 0 || options.dropout >= 1) {
    throw std::invalid_argument("--dropout " + std::to_string(options.dropout) +
                                ": must be in [0, 1)");
  }
  Generator init(seed);
  GeneratorGuard guard(init);
  const int64_t w = options.width;
  nn::Sequential model{nn::Linear(data::kFashionMnistPixels, w), nn::BatchNorm1d(w), nn::ReLU()};
  for (int b = 0; b < options.blocks; ++b) {
    nn::Sequential block{Stash("in"), nn::Linear(w, w), nn::BatchNorm1d(w), nn::ReLU()};
    if (options.dropout > 0) block.push_back(nn::Dropout(options.dropout));
    block.push_back(nn::Linear(w, w));
    block.push_back(nn::BatchNorm1d(w));
    block.push_back(AddStashed("in"));
    block.push_back(nn::ReLU());
    nn::isolate(block, nn::Namespace());
    for (size_t i = 0; i < block.size(); ++i) model.push_back_shared(block.ptr(i));
  }
  model.push_back(nn::Linear(w, data::kFashionMnistNumClasses));
  return model;
}

Task resnet_task(const ResNetOptions& options) {
  Task task = classifier_task();
  task.build_model = [options](const TrainConfig& c) { return build_resnet(options, c.seed); };
  task.describe = describe_skips;
  return task;
}

}  // namespace pipewright::examples
