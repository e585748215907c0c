// Keyed randomness: a random layer's draws as a function of where they happen in the model and
// the data, not of the thread or the order that runs them.
//
//   nn::RandomKeyGuard key({.seed = 7, .step = 12, .first_sample = 0});
//   Tensor y = model.forward(x);   // every nn::Dropout in `model` draws keyed masks
//
// Note [Keyed randomness]
// Outside a key scope, nn::Dropout draws from the thread's current_generator() (a stream:
// the numbers depend on how many draws came before on that thread). Inside one, the mask of
// a random layer is a pure function of
//
//   (seed, step, layer, draw, sample)
//
//   seed    the run's seed                     } RandomKey, installed by RandomKeyGuard
//   step    the training step (mini-batch)     }
//   layer   the index, in the whole model, of the top-level Sequential child running now
//           (Sequential::forward sets it; a pipeline partition is a slice that remembers
//           where it was cut from, Sequential::first_layer)
//   draw    how many keyed draws that child made before this one in this forward (a
//           TransformerBlock's attention, residual and MLP dropouts are draws 0, 1, 2)
//   sample  the index in the mini-batch of each row (dim 0) of the tensor: the key's
//           first_sample plus the row
//
// Philox's key is a hash of (seed, step, layer, draw); row r of x [n, ...] (k = numel / n
// elements a row) uses the stream values starting at (first_sample + r) · k, element i of the
// row value (first_sample + r) · k + i (tensor/generator.h's layout). So a micro-batch of rows
// [a, b) draws exactly the slice [a, b) of the whole mini-batch's mask: the masks depend on
// neither the micro-batch count, nor the cut into stages, nor the worker, nor the schedule,
// nor the data-parallel replica, and a recompute under the same key replays them. A pipeline
// (pipeline::Pipe) runs every cell under the key (its seed, its step count, the micro-batch's
// first row); the plain model run under the same RandomKeyGuard draws the same masks.
//
// The sample index is the row on dim 0: a model whose random layers see samples on another
// dim, or a batch split on another dim (pipeline::ChunkSpec), still gets replayable masks, but
// not the same ones under another micro-batching.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace pipewright::nn {

/// What keys the random draws of one forward (Note [Keyed randomness]).
struct RandomKey {
  uint64_t seed = 0;         // the run's seed
  uint64_t step = 0;         // the training step (mini-batch) number
  int64_t first_sample = 0;  // index in the mini-batch of row 0 of the tensors (>= 0)
};

/// Installs `key` as the calling thread's random key for the guard's lifetime (nestable:
/// the previous key, or none, comes back at its end). Throws std::invalid_argument for a
/// negative first_sample.
class RandomKeyGuard {
 public:
  explicit RandomKeyGuard(const RandomKey& key);
  ~RandomKeyGuard();
  RandomKeyGuard(const RandomKeyGuard&) = delete;
  RandomKeyGuard& operator=(const RandomKeyGuard&) = delete;

 private:
  // The thread's key state before the guard, restored at its end.
  bool active_;
  RandomKey key_;
  int64_t layer_;
  uint32_t draw_;
  int depth_;
};

/// Whether a RandomKeyGuard is live on this thread.
bool random_key_active();

/// Marks that the model's top-level child `layer` runs now, for the scope's lifetime: the
/// outermost scope under a key sets the layer and restarts its draw count; nested scopes (a
/// Sequential inside a child) change nothing, so their draws count as the child's. A no-op
/// outside a key scope. Sequential::forward opens one per child.
class LayerScope {
 public:
  explicit LayerScope(int64_t layer);
  ~LayerScope();
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

 private:
  bool active_;
  bool outermost_ = false;
  int64_t previous_layer_ = 0;
  uint32_t previous_draw_ = 0;
};

/// Where a keyed draw reads the Philox stream: key `seed`, values from `offset` on.
struct KeyedDraw {
  uint64_t seed = 0;
  uint64_t offset = 0;
  // What `seed` was made of, so a replayed graph can make the same draw's seed for a later
  // step (keyed_seed):
  RandomKey key = {};
  int64_t layer = 0;
  uint32_t draw = 0;
};

/// The seed `draw` would have had at step `step` of its key (Note [Keyed randomness]):
/// draw.seed when step == draw.key.step.
uint64_t keyed_seed(const KeyedDraw& draw, uint64_t step);

/// For a random layer about to draw one stream value per element of `x` (rows = samples on
/// dim 0; a rank-0 tensor is one row): the next draw of the current layer, counted, as in
/// Note [Keyed randomness]. Throws std::logic_error outside a key scope.
KeyedDraw next_keyed_draw(const Tensor& x);

}  // namespace pipewright::nn
