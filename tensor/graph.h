// DeviceGraph: the work issued on one device's streams during one call, captured once and
// replayed with a handful of host calls (CUDA graphs; Note [Graph pools] in
// cuda_kernels/caching_allocator.h for its memory).
//
// Note [Per-replay scalars]
// A replay reruns the captured kernels with the arguments they were launched with. Values the
// host computes anew every step (Adam's bias corrections and learning rate, a scheduler's
// lr) therefore cannot be kernel arguments of a replayed kernel: during a capture, such a
// kernel asks the capturing graph for a slot (scalar_slot) and reads its values from device
// memory. The slot's *hook* does on the host what the eager step would have done:
//   fill(bytes)  writes this replay's values (computed from the host's state as it is now),
//   commit()     advances that state, once the replay has run without error.
// replay() calls every fill, copies the slots to the device (one copy on the replay's stream,
// before the launch), launches; the caller commits after reading the step's results. A capture
// itself runs no kernel, so a slot's owner leaves its state alone while capturing: the launch
// that follows the capture fills and commits like every later one. Slots are 8-byte aligned.
//
// Usage (what pipeline/ does for a training step):
//   DeviceGraph graph(device);
//   graph.begin_capture(stream);   // work issued on `stream`, and on streams that wait for
//   ... issue the step ...         // its events, is recorded, not run
//   graph.end_capture();
//   for each step: copy inputs into the captured step's input tensors (on `stream`);
//                  graph.replay(stream); read results; graph.commit();
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace pipewright {

class DeviceGraph {
 public:
  using Fill = std::function<void(void* bytes)>;
  using Commit = std::function<void()>;

  /// An empty graph of `device` (a CUDA device; begin_capture refuses others).
  explicit DeviceGraph(Device device);
  /// Destroys the graph and gives its pool's free memory back (after the device's work).
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  /// Starts capturing `stream` (of this graph's device, not a default stream): until
  /// end_capture(), work issued on it, or on a stream that waited for an event recorded on it
  /// after this call, is recorded instead of run, and allocations of those streams come from
  /// this graph's pool. Throws std::invalid_argument for a stream of another device, a default
  /// stream or a CPU device; std::logic_error when already capturing or captured, or when
  /// another graph captures on this device.
  void begin_capture(const Stream& stream);
  /// Ends the capture. Throws the backend's error (naming what was refused during the
  /// capture, e.g. a host synchronisation) when it failed; the graph then stays empty and
  /// may be captured again.
  void end_capture();
  /// Ends a capture that failed on the caller's side, discarding it. Never throws.
  void abandon_capture() noexcept;
  bool capturing() const { return capturing_; }
  bool captured() const { return exec_ != nullptr; }

  /// Fills the per-replay scalars (Note [Per-replay scalars]), copies them to the device on
  /// `stream` and launches the graph there. Throws std::logic_error before end_capture().
  void replay(const Stream& stream);
  /// Runs every slot's commit, in the order the slots were made. Call once per replay that
  /// succeeded.
  void commit();

  /// During a capture on this graph's device: device memory for `bytes` bytes that every
  /// replay refills by `fill` before its launch (Note [Per-replay scalars]); `commit` runs at
  /// commit(). The pointer is valid, at the same address, for the graph's life. Thread-safe.
  /// Throws std::logic_error when the graph is not capturing.
  void* scalar_slot(size_t bytes, Fill fill, Commit commit);

  /// The graph capturing on `device` now, or nullptr (the one place kernels learn that
  /// their launch is being captured).
  static DeviceGraph* capturing_on(Device device);

  /// Bytes of device memory the graph's pool holds (its captured step's activations,
  /// temporaries and anything allocated during the capture), rounded to the allocator's size
  /// classes.
  int64_t pool_bytes() const;
  Device device() const { return device_; }

 private:
  struct Slot {
    size_t chunk, offset, bytes;
    Fill fill;
    Commit commit;
  };
  struct Chunk {
    Tensor device;                // float64 words on the device, from the graph's pool
    std::vector<double> host;     // the values the next replay copies there
    size_t used = 0;              // bytes
  };

  Device device_;
  int64_t pool_;                  // the allocator's graph pool id (unique per DeviceGraph)
  void* exec_ = nullptr;
  bool capturing_ = false;
  Stream stream_;                 // the capture's stream
  std::mutex mutex_;              // slots and chunks (scalar_slot runs on worker threads)
  std::vector<Chunk> chunks_;
  std::vector<Slot> slots_;
};

}  // namespace pipewright
