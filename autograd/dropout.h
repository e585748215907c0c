// Differentiable inverted dropout with a replayable mask.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace pipewright::autograd {

/// Inverted dropout (torch.nn.functional.dropout(training=True)): y = x ⊙ mask with
/// mask_i = [u_i >= p] / (1 - p), u the Philox uniform stream of `seed` starting at `offset`
/// (tensor/generator.h). The same (seed, offset) gives the same mask on every device and at
/// every call, which is how a recomputed forward reproduces its first forward exactly.
/// Gradient: dx = g ⊙ mask. The mask is regenerated from (seed, offset) in backward instead
/// of being saved, so the node holds no tensor at all.
/// `seed_slot` (a graph's per-replay slot, tensor/graph.h; nullptr: none): the kernels,
/// forward and backward, read the seed as a uint64 from there when they run instead of using
/// `seed`, so a replayed graph draws each step's mask. Without a slot, a call inside a graph
/// capture throws std::logic_error (its replays would repeat one mask).
/// Throws std::invalid_argument unless 0 <= p < 1.
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset,
               const void* seed_slot = nullptr);

/// How many values of the Philox stream one dropout of `x` consumes (what a caller must
/// Generator::reserve() for it): one 32-bit value per element, any dtype.
uint64_t dropout_stream_length(const Tensor& x);

}  // namespace pipewright::autograd
