// StageMemory: what every kind of action of one stage does to its device's allocated bytes,
// measured by probe_stage (stage_probe.h, Note [Probing a stage]) or estimated from a layer
// profile (estimate_stage, stage_estimate.h). The planner's pure search reads it; no model,
// tensor or runtime types here.
#pragma once

#include <cstdint>
#include <string>

namespace pipewright::pipeline {

/// One action's effect on its device: `peak` = the highest allocated() during it minus
/// allocated() before it (>= 0), `delta` = allocated() after minus before.
struct ActionBytes {
  int64_t peak = 0;
  int64_t delta = 0;
};

/// The bytes of one stage's cell actions for micro-batches of `rows` rows (stage_probe.h's file comment).
struct StageMemory {
  int first = 0, last = 0;  // the layers [first, last)
  bool is_first = false, is_last = false;
  int64_t rows = 0;
  bool exact = false;             // measured by probe_stage (else estimated)
  int64_t input_bytes = 0;        // the activation message arriving before F (0 on stage 0)
  int64_t output_bytes = 0;       // the activation message F sends (0 on the last stage)
  int64_t grad_output_bytes = 0;  // the gradient message arriving before B / I (0 on the last)
  int64_t grad_input_bytes = 0;   // the gradient message B / I sends (0 on stage 0)
  // Of input_bytes and grad_output_bytes, the portals' part (skips crossing the stage's
  // first or last cut, Note [Cuts inside a skip], cuts.h): portals travel as they are, never
  // narrowed, and pass between two stages of one worker without a copy even under a 16-bit
  // policy (MemoryModel::copied_handoffs).
  int64_t input_portal_bytes = 0;
  int64_t grad_output_portal_bytes = 0;
  int64_t parameter_bytes = 0;    // the stage's parameters (each has a .grad of this size too)
  int64_t buffer_bytes = 0;       // its buffers (BatchNorm's running statistics)
  int64_t target_bytes = 0;       // last stage: the micro-batch's targets, there all step
  ActionBytes forward_first, forward;        // recorded F; _first: the stage's first F
  ActionBytes checkpoint_first, checkpoint;  // F of a checkpointed cell
  ActionBytes recompute;                     // R
  ActionBytes backward_first, backward;      // B; _first: the stage's first backward
  // I; _first: the stage's first I, which creates the .grad of the parameters whose
  // gradients B computes (LayerNorm, BatchNorm, Embedding: Note [What W takes], engine.cc)
  ActionBytes backward_input_first, backward_input;
  ActionBytes weight_first, weight;          // W; _first: the stage's first W

  /// "layers [3, 7) rows 32: F +1.2 MiB (peak 1.5 MiB), B ...": for --explain.
  std::string str() const;
};

}  // namespace pipewright::pipeline
