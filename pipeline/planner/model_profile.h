// The layer profile's data (profile.h measures it): what each layer of a Sequential costs,
// as the planner's pure search (search.h) reads it. No model, tensor or runtime types here.
// What the fields mean: profile.h's file comment.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipewright::pipeline {

/// y = fixed + per_row · rows, fitted through two measured sizes (exact at both).
struct Affine {
  double fixed = 0;
  double per_row = 0;

  double at(int64_t rows) const { return fixed + per_row * static_cast<double>(rows); }
  /// at(rows) rounded to whole bytes, never negative.
  int64_t bytes(int64_t rows) const;
  /// The line through (r1, y1) and (r2, y2); a constant when r1 == r2.
  static Affine through(int64_t r1, double y1, int64_t r2, double y2);
};

/// One layer's costs, for a micro-batch of `rows` rows (profile.h's file comment).
struct LayerProfile {
  std::string name;               // the layer's str(), to recognise a stale cache
  // microseconds
  Affine forward_us, backward_us, backward_input_us, backward_weight_us;
  // bytes
  int64_t parameter_bytes = 0;    // Σ nbytes over the layer's parameters that require grad
  int64_t buffer_bytes = 0;       // Σ nbytes over its buffers (BatchNorm's running statistics)
  Affine output_bytes;            // the layer's outputs
  Affine message_bytes;           // the same as a message crossing a cut after the layer: under
                                  // a 16-bit policy its float32 tensors travel narrowed
                                  // (Note [16-bit messages], pipeline/stage_fn.cc)
  Affine activation_bytes;        // kept after a recorded forward, beyond its output (saved
                                  // tensors), with the input counted where it is kept
  Affine forward_peak_bytes;      // the forward's highest allocation above what it starts with
  Affine backward_peak_bytes;     // the backward's, its input gradient included
  Affine first_forward_bytes;     // kept for the rest of the step by the first forward only
                                  // (deferred BatchNorm's running sums)
  bool frees_input = false;       // its input is freed once its forward has run (nothing kept it)
};

struct ModelProfile {
  std::vector<LayerProfile> layers;  // one per child of the Sequential
  LayerProfile loss;                 // the loss on the last layer's output (no parameters)
  int64_t input_bytes_per_row = 0;   // the first stage's input (copied to its device in F)
  int64_t target_bytes_per_row = 0;  // the last stage's targets (copied there at step start)
  int64_t loss_bytes = 0;            // one loss value (kept until the step ends)
  int64_t batch_rows = 0;            // N of the sample mini-batch
  int threads = 1;                   // intra-op threads each layer was timed with
  double copy_bytes_per_us = 0;      // a copy between two of the devices
  Affine input_copy_us;              // stage 0's micro-batch copied from where the sample is
                                     // (the host, for a data loader's batch) to the device
  std::string fingerprint;           // the model, sample shapes and threads (profile_model)

  int num_layers() const { return static_cast<int>(layers.size()); }
};

}  // namespace pipewright::pipeline
