// DeviceGraph: the work issued on the streams of one device, or of several, during one call,
// captured once and replayed with a handful of host calls (CUDA graphs; Note [Graph pools] in
// cuda_kernels/caching_allocator.h for its memory; Note [A graph over devices] below).
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
// Their device memory is allocated before the capture begins, never from the graph's pool: a
// pool block may serve as a temporary of an earlier kernel of the same graph, which would
// overwrite the values copied in before the launch.
//
//
// Note [Staged inputs]
// A replay's inputs (a batch and its targets) live at fixed addresses the graph reads. They sit
// beside the slots in one device area, with a page-locked host twin: replay(stream, sources)
// writes the sources and the slots' values into the host twin and moves all of it with one
// asynchronous copy, so a replayed step costs the host one copy and one launch before its read.
// The host twin is rewritten at every replay: replay again only after the stream has passed
// the previous replay's copy (the Pipe reads each step's losses, a host wait, before the next).
//
// Note [A graph over devices]
// One graph may hold the work of several GPUs of one process (a Pipe whose stages sit on
// cuda:0 and cuda:1): CUDA builds a multi-device graph when a stream of another device joins
// a capture by waiting for an event recorded in it, and one launch then runs every device's
// nodes. DeviceGraph({home, others...}) captures that way: begin_capture(stream of home)
// forks one stream per other device into the capture (stream_of(device): the caller makes it
// its current stream of that device, so its fences and copies are captured), end_capture joins
// them back; each device's allocations come from the graph's pool on that device. Staged
// inputs live on home. Each device's slots live on that device (a kernel reads its scalars
// from its own memory, never a peer's): the host twin holds every device's slots behind
// home's, the one copy of a replay moves them all to home, and the graph begins with one
// copy per other device of its section (kSlotBytes) to that device, so a replay still costs
// the host one copy and one launch, and two calls per other device: a launch is ordered
// after its own stream's work only, so the launch stream first waits (an event) for the
// caller's current stream of each other device, where the eager steps and the caller's own
// work on that device ran. Work after a replay is ordered by the caller's host wait for the
// launch stream (its graph's every node done). The gate is copied to every device in the
// capture (set_gate), so each update reads it locally.
//
// Usage (what pipeline/ does for a training step):
//   DeviceGraph graph(device);
//   auto inputs = graph.stage_inputs({{x.shape(), x.dtype()}, {y.shape(), y.dtype()}});
//   graph.begin_capture(stream);   // work issued on `stream`, and on streams that wait for
//   ... issue the step on inputs ...  // its events, is recorded, not run
//   graph.end_capture();
//   for each step: graph.replay(stream, {x, y}); read results; graph.commit();
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "tensor/stream.h"
#include "tensor/tensor.h"

namespace pipewright {

/// Writes `value` rounded once to `dtype` (float32, else float64) as element `index` of
/// `bytes`: a slot's fill for a kernel that reads its values in a parameter's dtype.
void store_scalar(void* bytes, size_t index, double value, DType dtype);

/// Whether `gate` (a float64 on the kernel's device that a captured step computed; nullptr:
/// no gate) says the step failed, so an update reading it writes nothing
/// (DeviceGraph::set_gate). For the CPU kernels; CUDA kernels test the same on the device.
inline bool gate_closed(const void* gate) {
  return gate != nullptr && !(*static_cast<const double*>(gate) == 0.0);
}

class DeviceGraph {
 public:
  using Fill = std::function<void(void* bytes)>;
  using Commit = std::function<void()>;

  /// An empty graph of `device` (a CUDA device; begin_capture refuses others).
  explicit DeviceGraph(Device device);
  /// An empty graph over `devices` (distinct CUDA devices of one type; the first is home:
  /// the capture's stream, the staged inputs; Note [A graph over devices]). Throws
  /// std::invalid_argument for none, a repeated device or devices of different types.
  explicit DeviceGraph(std::vector<Device> devices);
  /// Destroys the graph and gives its pool's free memory back (after the device's work).
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  /// Starts capturing `stream` (of the home device, not a default stream): until
  /// end_capture(), work issued on it, on stream_of(d) for the graph's other devices d, or on
  /// a stream that waited for an event recorded on one of them after this call, is recorded
  /// instead of run, and allocations of those streams come from this graph's pool on their
  /// device. Throws std::invalid_argument for a stream of another device, a default stream or
  /// a CPU device; std::logic_error when already capturing or captured, or when another graph
  /// captures on one of its devices.
  void begin_capture(const Stream& stream);
  /// During a capture: the stream of `device` that the capture forked (the capture's own
  /// stream for home). Throws std::invalid_argument for a device not in the graph,
  /// std::logic_error when not capturing.
  const Stream& stream_of(Device device) const;
  /// Ends the capture, joining the forked streams back. Throws the backend's error (naming
  /// what was refused during the capture, e.g. a host synchronisation) when it failed; the
  /// graph then stays empty and may be captured again.
  void end_capture();
  /// Ends a capture that failed on the caller's side, discarding it. Never throws.
  void abandon_capture() noexcept;
  bool capturing() const { return capturing_.load(std::memory_order_acquire); }
  bool captured() const { return exec_ != nullptr; }

  /// Before begin_capture, at most once: tensors of these shapes and dtypes on the graph's
  /// device, at addresses fixed for the graph's life, which replay() fills from its sources
  /// (Note [Staged inputs]). Throws std::logic_error when called late or twice.
  std::vector<Tensor> stage_inputs(const std::vector<std::pair<Shape, DType>>& specs);

  /// Writes `sources` (one per staged input, same shape and dtype, on the CPU or on this
  /// graph's device; none: the staged inputs keep their values) and the per-replay scalars
  /// (Note [Per-replay scalars]) to the device with one copy on `stream` (a source already
  /// on the device: its own device copy), then launches the graph on `stream`, which should
  /// be the calling thread's current stream of the device; over devices, it first waits for
  /// the thread's current stream of each other device. The last replay's copy must have run
  /// before this one's values are written: where the host has not waited for its stream
  /// since, replay waits for it first (Note [One host area], graph.cc). Throws
  /// std::logic_error before end_capture(), std::invalid_argument for sources that do not
  /// match.
  void replay(const Stream& stream, const std::vector<Tensor>& sources = {});
  /// Runs the slots' commits, in the order the slots were made. Call once per replay that
  /// succeeded; `updated` false when its gate held the updates back although the step ran
  /// (a loss-scaling overflow skipped the optimizer): the gated slots' commits do not run.
  void commit(bool updated = true);

  /// During a capture: memory of `device` (one of the graph's) for `bytes` bytes that every
  /// replay refills by `fill` before its launch (Note [Per-replay scalars]); `commit` runs at
  /// commit(). `gated`: the slot's kernel is an update that reads gate(), so its commit runs
  /// only for a replay whose update happened (commit(true)). The pointer is valid, at the
  /// same address, for the graph's life. Thread-safe. Throws std::invalid_argument for a
  /// device not in the graph, std::logic_error when the graph is not capturing,
  /// std::length_error when the device's kSlotBytes are used up (the capture then fails).
  void* scalar_slot(Device device, size_t bytes, Fill fill, Commit commit, bool gated = false);
  /// The slots' capacity per device: 64 KiB (2,048 Adam parameters).
  static constexpr size_t kSlotBytes = size_t{64} << 10;

  /// During a capture: a one-element float64 on one of the graph's devices that the captured
  /// step computes (0: the step went well) before its updates, which updating kernels read
  /// (adam_step_indirect's gate): a replayed step that failed (a non-finite loss) then
  /// changes no parameter, as its eager step would not have (the host finds the failure after
  /// the launch). Copied to every other device of the graph (captured copies, ordered as
  /// Tensor::to orders them: Note [Copies between devices], tensor.cc). The gate a kernel reads
  /// is the one set when it was captured (the optimizer's may add a loss-scaling overflow to
  /// the step's). An undefined tensor: no gate. Throws std::logic_error when not capturing,
  /// std::invalid_argument for a gate on no device of the graph.
  void set_gate(const Tensor& gate);
  /// The gate's copy on `device` (nullptr: no gate, or a device not in the graph).
  const void* gate(Device device) const;

  /// The graph capturing on `device` now, or nullptr (the one place kernels learn that
  /// their launch is being captured).
  static DeviceGraph* capturing_on(Device device);

  /// Bytes of device memory the graph's pools hold on all its devices (its captured step's
  /// activations, temporaries and anything allocated during the capture), rounded to the
  /// allocator's size classes.
  int64_t pool_bytes() const;
  /// The home device (the capture's stream, the staged inputs).
  Device device() const { return devices_.front(); }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  struct Slot {
    size_t offset, bytes;  // offset in bytes into the area (and its host twin)
    Fill fill;
    Commit commit;
    bool gated;
  };
  size_t index_of(Device device, const char* api) const;  // throws for another device
  void end_forks(std::exception_ptr* first_error) noexcept;  // joins the forked streams
  void unregister();                                         // from capturing_on's registry
  void discard_exec(void* exec) noexcept;                    // destroys a graph exec (or none)
  void discard_slots();                                      // a failed capture's slots

  std::vector<Device> devices_;   // [0]: home
  int64_t pool_;                  // the allocator's graph pool id (unique per DeviceGraph)
  void* exec_ = nullptr;
  std::vector<Tensor> gates_;     // per device: the gate's copy there (set_gate)
  std::atomic<bool> capturing_{false};  // read by workers' scalar_slot calls
  Stream stream_;                 // the capture's stream
  std::vector<Stream> forked_;    // per other device: the stream forked into the capture
  std::vector<Tensor> member_areas_;  // per other device: its slots (kSlotBytes) there
  std::vector<Event> fences_;     // per other device: a replay waits for its current stream
  struct Staged {
    Tensor tensor;      // a view of area_
    size_t offset;      // bytes into the area
  };
  void make_area(size_t input_bytes);
  Tensor area_view(size_t offset, const Shape& shape, DType dtype) const;  // bytes into area_

  std::mutex mutex_;              // the slots (scalar_slot runs on worker threads)
  Tensor area_;                   // [staged inputs | slots of each device] on home, made
                                  // before the capture (Note [Per-replay scalars], [Staged
                                  // inputs], [A graph over devices])
  void* area_host_ = nullptr;     // its page-locked twin
  // Note [One host area]: the last replay's copy from area_host_, until the host has waited
  // for its stream.
  void* copied_on_ = nullptr;     // the stream of the last replay's copy
  bool copy_pending_ = false;
  uint64_t waits_started_at_copy_ = 0;  // host_waits(copied_on_).started after the copy
  size_t area_bytes_ = 0;
  size_t slots_offset_ = 0;       // bytes: where the slots begin (device k's at + k·kSlotBytes)
  std::vector<size_t> slots_used_;  // per device, bytes
  std::vector<Staged> staged_;
  std::vector<Slot> slots_;
};

}  // namespace pipewright
