// A residual MLP for Fashion-MNIST whose identity skips are Stash / AddStashed layers, cut
// into pipeline stages like any other model (a skip cut apart crosses stages as a portal):
//
//   784 -> Linear -> BatchNorm1d -> ReLU                                      stem, width W
//       -> [ Stash(in) -> Linear -> BatchNorm1d -> ReLU -> Dropout
//                      -> Linear -> BatchNorm1d -> AddStashed(in) -> ReLU ] x blocks
//       -> Linear -> 10 logits
//
// Every layer is a child of one flat Sequential (a block is not a child of its own), so a
// stage boundary may fall inside a block. Each block is isolated in its own nn::Namespace:
// all of them stash and pop the same name "in".
#pragma once

#include <cstdint>

#include "examples/fashion_mnist/trainer.h"
#include "nn/sequential.h"

namespace pipewright::examples {

struct ResNetOptions {
  int64_t width = 256;  // W
  int blocks = 2;
  double dropout = 0.2;  // inside each block, after its first ReLU (0: none)
};

/// Children per block: Stash, Linear, BatchNorm1d, ReLU, [Dropout,] Linear, BatchNorm1d,
/// AddStashed, ReLU.
int64_t resnet_block_size(const ResNetOptions& options);

/// The model above, weights drawn from a Generator seeded with `seed`. Throws
/// std::invalid_argument naming the value for width < 1, blocks < 0 or dropout outside [0, 1).
nn::Sequential build_resnet(const ResNetOptions& options, uint64_t seed);

/// The classifier task (cross-entropy, test accuracy) with this model; the run's header lists
/// the skip routes.
Task resnet_task(const ResNetOptions& options);

}  // namespace pipewright::examples
