// Cell: one micro-batch through one stage, and everything its backward needs in between.
//
// Note [Per-cell tapes]
// A cell's forward runs the stage on a DETACHED copy of its input handles, marked
// requires_grad. The autograd graph recorded by the stage therefore ends at the cell's own
// input leaves (autograd/node.h, Note [The graph is the tape]): each cell owns its tape,
// and the cell's backward is
//
//     grad_inputs = autograd::backward(outputs, grad_outputs, inputs)
//
// which accumulates the stage's parameter gradients and returns exactly the gradient to send
// to the stage on the left. No graph ever spans two workers, so workers run backward on
// their own cells concurrently without locks (engine.h: stages own disjoint parameters; a
// parameter shared by stages on different workers is refused when the Pipe is built, and
// held as tied copies instead: Note [Tied parameters]). For
// I/W schedules, backward_input() passes the cell's own WeightGradQueue as
// BackwardOptions::defer_weight_grads, and W (backward_weight()) runs it. Stage 0's inputs
// need a gradient only when the user's input requires one (needs_grad), so the first layer
// of a model fed with data computes no input gradient, as in plain autograd.
//
// Note [Checkpointed cells]
// A checkpointed cell keeps only its inputs and its RNG state:
//
//   F  (seed, offset) = rng state            NoGradGuard + is_checkpointing()
//      outputs = stage(inputs)               -> sent right, nothing recorded, nothing kept
//   R  rng state = (seed, offset)            is_recomputing(): BatchNorm skips its
//      outputs = stage(inputs)  (recorded)   running-stat update, Dropout replays the mask
//      rng state = what it was before R
//   B  backward as for any cell
//
// Note [16-bit checkpoints]
// Under a 16-bit precision policy a stage's input message arrives in the 16-bit dtype and is
// widened to float32 for the stage (Note [16-bit messages], stage_fn.cc): every value in it
// is a 16-bit value. A checkpointed cell given that message as it arrived (`arrived`) keeps it
// instead of its widened inputs, half the bytes for the whole time between F and R, and R
// widens it again: exactly the same float32 values, so the recompute is bitwise the same.
// Stage 0's batch (the user's values, not rounded) and portals (stashed mid-layer) are not
// in the message and are kept as they are. With activation checkpointing, what the cells
// keep is most of a stage's activation memory.
//
// Note [Replaying randomness]
// The runtime runs every cell's stage under the cell's random key (Note [Keyed randomness],
// nn/random_key.h), in F and in R alike, so keyed draws (Dropout) repeat by construction.
// What draws from the thread's current_generator() instead (a custom layer) reads the
// worker's own Philox Generator (worker.h): restoring its (seed, offset) before R reproduces
// those numbers bit for bit (tensor/generator.h), and restoring the stream afterwards means R
// consumes no randomness, so a checkpointed and a plain run of the same step draw identical
// numbers.
#pragma once

#include <cstdint>
#include <functional>

#include "autograd/engine.h"
#include "nn/module.h"
#include "tensor/generator.h"

namespace pipewright::pipeline {

/// What a cell's forward keeps for its backward.
enum class CellMode : uint8_t {
  kNoGrad,      // eval / no_grad: record nothing, keep nothing
  kRecord,      // record the graph, keep inputs and outputs
  kCheckpoint,  // record nothing, keep inputs and RNG state; R rebuilds the graph
};

/// The function a cell runs: the stage's forward (plus, on the last stage of train_step, the
/// loss). Called on the owning worker's thread.
using StageFn = std::function<nn::Tensors(const nn::Tensors&)>;

class Cell {
 public:
  Cell() = default;
  Cell(const Cell&) = delete;
  Cell& operator=(const Cell&) = delete;
  Cell(Cell&&) = default;
  Cell& operator=(Cell&&) = default;

  /// F: runs `fn` on `inputs` (already on the stage's device) per `mode` and returns the
  /// outputs detached (safe to hand to another thread). Unless mode is kNoGrad, input i
  /// becomes a requires_grad leaf when it is floating and needs_grad[i] is set (an empty
  /// needs_grad means every floating input). Exceptions from `fn` propagate.
  ///
  /// `arrived`: the 16-bit message that inputs[0, arrived.size()) were widened from, exactly
  /// (stage_fn.h's widen_message); a kCheckpoint cell keeps those entries as they arrived and
  /// widens them again in R (Note [16-bit checkpoints]). Other modes ignore it. Throws
  /// std::invalid_argument when it is longer than `inputs`.
  nn::Tensors forward(const StageFn& fn, const nn::Tensors& inputs, CellMode mode,
                      Generator& rng, const std::vector<char>& needs_grad = {},
                      const nn::Tensors& arrived = {});

  /// R: rebuilds the graph of a checkpointed cell. Throws std::logic_error when the cell was
  /// not checkpointed or was already recomputed.
  void recompute(const StageFn& fn, Generator& rng);

  /// B (defer == nullptr) or I (defer == this cell's weight queue, see backward_input()):
  /// gradients of the inputs, one per input (undefined for inputs that need none, or that no
  /// gradient reached). An undefined entry of `grad_outputs` means that output got none: it
  /// takes no part, as in plain autograd (a parameter reached only through it keeps an
  /// undefined .grad, never zeros). Frees the graph (unless retained). Throws
  /// std::logic_error when the cell has no graph (not forwarded, not recomputed, or already
  /// backpropagated).
  nn::Tensors backward(const nn::Tensors& grad_outputs);
  nn::Tensors backward_input(const nn::Tensors& grad_outputs);
  /// Whether `grad_outputs` (as for backward()) holds no gradient for any output that has
  /// autograd history, while some output has: a backward from them would compute nothing,
  /// which the runtime refuses (Note [A loss without history], stage_fn.cc). False when the
  /// cell holds no graph.
  bool gets_no_gradient(const nn::Tensors& grad_outputs) const;

  /// W: runs the weight-gradient halves deferred by backward_input().
  void backward_weight();

  /// Makes the next B / I / W keep the graph (autograd's retain_graph), so that the cell's
  /// backward can run again, without R (Pipe::forward's output backpropagated twice). Reset
  /// by forward() and reset().
  void set_retain_graph(bool retain) { retain_graph_ = retain; }

  /// Drops everything (inputs, outputs, graph, deferred work).
  void reset();

 private:
  nn::Tensors backward_impl(const nn::Tensors& grad_outputs, autograd::WeightGradQueue* defer);
  /// A checkpointed F's end: keeps `arrived` in place of the inputs widened from it.
  void keep_arrived(const nn::Tensors& arrived);

  CellMode mode_ = CellMode::kNoGrad;
  nn::Tensors inputs_;   // detached leaves (a checkpointed cell: 16-bit until R)
  // A checkpointed cell's inputs kept in 16 bits (Note [16-bit checkpoints]): whether entry i
  // is widened in R, and whether it then becomes a requires_grad leaf again.
  std::vector<char> widen_in_recompute_, leaf_in_recompute_;
  nn::Tensors outputs_;  // recorded outputs (kRecord, or after R)
  bool has_graph_ = false;
  bool recomputed_ = false;
  bool retain_graph_ = false;
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
  autograd::WeightGradQueue weight_grads_;
};

}  // namespace pipewright::pipeline
