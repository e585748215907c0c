// StepGraph: a Pipe's whole training step captured as one CUDA graph (PipeOptions::cuda_graphs).
//
// Note [A step as one graph]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A warm step issues ~280 CUDA calls from the host (kernels, cuBLAS, events) for ~1 ms of GPU
// work, so a small model's step is bound by the host. Pipe::train_step(..., optimizer) can
// instead capture the whole step — every worker's actions of the schedule, the loss, the
// gather of the losses and deferred checks, clipping (StepOptions::max_grad_norm), the
// optimizer's update on each stage's worker — as one graph (tensor/graph.h) and replay it:
//
//   step 1 of a kind   eagerly (Adam's state is made; caches, cuBLAS workspaces warm up)
//   step 2             zero_grad, then captured on a stream of the Pipe: the caller's thread
//                      begins the capture; each worker's stream joins it by waiting for the
//                      entry fence's event (Note [The caller's streams], runtime.cc) and is
//                      joined back by the exit fence, so every stream's work is in the one
//                      graph; memory comes from the graph's pool (Note [Graph pools]); nothing
//                      runs; then launched as below
//   every step from 2  the batch, its targets and the per-replay scalars (Adam's lr and bias
//                      corrections, SGD's lr, Dropout's seeds: Note [Per-replay scalars]) sent
//                      in one copy (Note [Staged inputs]), the graph launched on the caller's
//                      current stream, the gathered losses and flags read (the step's one
//                      wait), the slots' host state committed: 4 host CUDA calls
//
// A kind is a key: the inputs' and targets' shapes, dtypes and devices, the step's options,
// the optimizer, and where every parameter, buffer and optimizer state lives (a graph reads
// fixed addresses: load_state_dict, a new optimizer, the last smaller batch, a model put in
// eval mode make another kind). Another kind drops the graph and starts over (said once on
// stderr). Steps that cannot be captured run eagerly, said once: a Pipe over processes, or
// a stage not on a CUDA device; an optimizer that is not capturable(); inputs that need
// gradients;
// returned outputs or non-tensor arguments (both baked into a graph); a device timeline
// (StepOptions::device_timeline: a replay is traced by no one); a capture that failed
// (the backend names the call CUDA refused, e.g. a host wait inside a kernel wrapper).
//
// With StepOptions::grad_scaler the scale is one more staged input and the overflow finding
// one more gathered value (Note [Loss scaling without a host read], pipe_clip_grad.cc).
//
// What a replay cannot redo on the host is either the same every step (micro-batch sizes,
// loss weights, the schedule) or read from device memory (the slots: keyed Dropout's seed
// included, so every replay draws its step's mask; a layer drawing from a Generator would
// repeat one and is refused). A replay that fails is found by the host after the launch: the
// captured step computes a gate from its gathered values first, which the updates read
// (DeviceGraph::set_gate), so it changes nothing, as its eager step would not.
//
// Note [A step over devices]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Stages on several GPUs of one process (devices {cuda:0, cuda:1}) are still one graph (Note
// [A graph over devices], tensor/graph.h), not one per device: CUDA's multi-device graphs
// run every device's nodes from one launch, and the edges between devices (a message's copy,
// the fences) are the capture's own events, where graphs per device would need events
// between graphs at every message. The capture begins on the Pipe's stream of the first
// stage's device (home: the staged inputs live there); the graph forks a stream of each other
// device into the capture, which the caller's thread makes its current stream there, so the
// entry and exit fences of every worker (Note [The caller's streams]), the clipping norm's
// shares, the loss-scaling finding and each stage's optimizer update are captured on their
// own device. The gathered losses and flags are moved to home at the end of the captured step
// (gather_on), so the host still reads once. The updates' gate is copied to every device. A
// replay costs 4 host calls plus 2 per other device (the launch waits for the caller's stream
// there: tests/cuda:step_api_count_test counts 6 on two GPUs). Copies between the GPUs go over
// peer access (Note [Peer copies], cuda_kernels/backend.cc); without it the capture fails
// and the steps run eagerly. Under cudasim a replay runs each op on its own device and the
// race detector checks the graph against the work around it (tests/cuda:pipe_graph_test,
// tests/cudasim:graph_test); no card with two GPUs has run it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/step.h"
#include "pipeline/step_result.h"
#include "tensor/graph.h"
#include "tensor/stream.h"

namespace pipewright::pipeline {

class StepGraph {
 public:
  /// What must not change between a capture and its replays (Note [A step as one graph]).
  struct Key {
    std::vector<std::vector<int64_t>> shapes;  // inputs then targets
    std::vector<int> dtypes;
    std::vector<Device> devices;
    std::vector<const void*> addresses;  // parameters, buffers, optimizer state
    const void* optimizer = nullptr;
    int reduction = 0;
    double loss_scale = 1.0;
    double max_grad_norm = 0.0;
    bool loss_scaling = false;  // StepOptions::grad_scaler (its scale is an input)
    int64_t first_sample = 0;
    bool training = true;
    bool operator==(const Key&) const = default;
  };

  /// Prints `message` on stderr, once per distinct message.
  void say_once(const std::string& message);
  /// Drops the graph and its step (the next step of `key` runs eagerly first).
  void reset(Key key);

  std::optional<Key> key;
  bool ran_eagerly = false;                // a step of `key` ran eagerly (next: capture)
  bool stays_eager = false;                // its capture failed: steps of `key` run eagerly
  std::unique_ptr<DeviceGraph> graph;
  std::shared_ptr<Step> step;              // the captured step: its losses' places, checks
  StepResult result;                       // the captured step's result, without values
  nn::Tensors inputs, targets;             // the graph's own input tensors
  Tensor loss_scale;                       // and its loss scale (StepOptions::grad_scaler)
  Tensor update_gate;                      // the optimizer's gate: the step's + the finding
  std::optional<Stream> stream;            // the capture's stream (the Pipe's own)
  int64_t replays = 0, captures = 0;

 private:
  std::vector<std::string> said_;
};

}  // namespace pipewright::pipeline
