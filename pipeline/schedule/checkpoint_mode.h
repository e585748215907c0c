// Checkpoint: which micro-batches drop their activations after the forward and recompute them
// before the backward (torchgpipe's `checkpoint=` argument).
//
//   mode          micro-batch i (of m) is checkpointed iff
//   kAlways       i < m            every micro-batch
//   kExceptLast   i < m - 1        all but the last: its backward starts right after its
//                                  forward on the last stage, so recomputing it would gain
//                                  no memory and cost time (torchgpipe's default)
//   kNever        never
//
// The same mode holds on every stage. Eval / no-grad passes never checkpoint (the runtime's
// business, not this file's).
#pragma once

#include <string>
#include <string_view>

namespace pipewright::pipeline {

enum class Checkpoint { kAlways, kExceptLast, kNever };

/// "always", "except_last" or "never"; anything else throws std::invalid_argument naming the
/// value and listing the valid ones.
Checkpoint parse_checkpoint(std::string_view text);

/// The inverse of parse_checkpoint: "always", "except_last", "never".
std::string to_string(Checkpoint mode);

/// True iff micro-batch `microbatch` of `num_microbatches` is checkpointed under `mode`.
bool is_checkpointed(Checkpoint mode, int microbatch, int num_microbatches);

}  // namespace pipewright::pipeline
