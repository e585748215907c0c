// Schedule: what each pipeline worker does, in order, as pure data.
//
// A cell is (micro-batch j, stage s). A schedule lists, for each worker, the actions it runs
// in order. Stages are *virtual* stages: with interleaving, worker w owns stages w, w+p,
// w+2p, ... (v virtual stages per worker); otherwise stage s is worker s.
//
//   F  forward of micro-batch j on stage s (keeps what its backward needs, or only its input
//      when the cell is checkpointed)
//   R  recompute of a checkpointed cell's forward into a fresh tape, just before its backward
//   B  full backward (input gradient and weight gradient)
//   I  input-gradient half of the backward (zero-bubble "B")
//   W  weight-gradient half, deferred (zero-bubble "W")
//
// Dependencies (what the validator and replay enforce; the runtime's channels implement
// the cross-worker ones):
//   F(s, j)      after F(s-1, j)                                 (activation from the left)
//   R(s, j)      after F(s, j)
//   B/I(s, j)    after F(s, j), R(s, j) if present, and B/I(s+1, j)  (gradient from the right)
//   W(s, j)      after I(s, j)
// and for every skip connection crossing stages a -> b (Schedule::skips, Note [Portals] in
// stage_skips.h), the portal's two messages:
//   F(b, j)      after F(a, j)                                   (the stashed tensor)
//   B/I(a, j)    after B/I(b, j)                                 (its gradient)
// Both follow from the chains above when a < b; listing them lets the validator and the
// replay see each message (and its latency) like any other.
// The last stage's B/I starts from the loss of its own F (train_step) or from the gradient
// the user's loss.backward() hands over (Pipe::forward).
//
// Where the rest lives: generators and with_recompute in generators.h, the names and the
// facts of each schedule (make_schedule) in registry.h, validate() in
// validate.h, replay_schedule() in replay.h, to_ascii / to_csv / from_csv / to_svg in ascii.h,
// io.h and svg.h (the Chrome trace of a replayed schedule: Trace::replayed in
// pipeline/trace.h); the story with pictures in docs/schedules.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipewright::pipeline {

enum class ActionKind : uint8_t { kForward, kRecompute, kBackward, kBackwardInput, kBackwardWeight };

/// One letter: F, R, B, I, W.
char action_letter(ActionKind kind);

struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;

  friend bool operator==(const Action& a, const Action& b) {
    return a.stage == b.stage && a.kind == b.kind && a.microbatch == b.microbatch;
  }
  /// "F3@1" = forward of micro-batch 3 on stage 1.
  std::string str() const;
};

/// A skip connection's portal: stashed on stage `from`, popped on stage `to` (from < to).
struct SkipEdge {
  int from = 0;
  int to = 0;
  friend bool operator==(const SkipEdge&, const SkipEdge&) = default;
};

struct Schedule {
  std::string name;            // a registered name (registry.h), "custom", or the file read
  int num_workers = 0;         // p
  int num_stages = 0;          // p * v (virtual stages)
  int num_microbatches = 0;    // m
  std::vector<int> stage_worker = {};             // worker of each stage, size num_stages
  std::vector<std::vector<Action>> actions = {};  // per worker, in execution order
  std::vector<SkipEdge> skips = {};               // portals between stages (Pipe fills them in)

  /// Stages owned by `worker`, ascending.
  std::vector<int> stages_of(int worker) const;
};

// Stage placement (Schedule::stage_worker) is data: any map from stages to workers that
// gives every worker a stage is valid. Two are standard:
//
//   round robin, p = 2, v = 2:   stage 0 1 2 3        V shape, p = 2:   stage 0 1 2 3
//                                worker 0 1 0 1                          worker 0 1 1 0
//
// Round robin (stage s on worker s % p) is GPipe's, 1F1B's, Megatron's interleaving and
// looped BFS's. The V shape (worker w holds stages w and 2p-1-w) is ZB-V's and DualPipeV's:
// the first and last stages share a worker, so the loss's gradient starts on the worker that
// holds the first stage, and the turn at the V's bottom needs no transfer.

/// Stage s on worker s % p, for p·v stages. Throws std::invalid_argument if p < 1 or v < 1.
std::vector<int> round_robin_placement(int p, int v = 1);
/// Worker w holds stages w and 2p-1-w (2p stages). Throws std::invalid_argument if p < 1.
std::vector<int> v_placement(int p);

}  // namespace pipewright::pipeline
