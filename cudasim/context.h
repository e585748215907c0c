// The runtime's process-wide state (a leaked singleton: stream worker threads are never joined
// at exit and no destructor runs then) and the one path every stream operation takes:
//
//   enqueue(request)            under the runtime lock
//     resolve the stream ─ sticky? ─ check pointers ─ clocks/deps (race.h) ─ race check
//     ─ commit: stream clock, shadow accesses, on_commit, push to the worker
//
// Host synchronisation helpers join the waited-for clocks into the host thread's clock.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cudasim/cudasim.h"
#include "cudasim/memory.h"
#include "cudasim/race.h"
#include "cudasim/sim_internal.h"
#include "cudasim/streams.h"

namespace cudasim::detail {

struct Request;
/// A captured graph (cudaGraph_t) or an instantiated one (cudaGraphExec_t): its operations
/// (Note [Stream capture], graphs.cc).
using GraphOps = std::shared_ptr<const std::vector<Request>>;

struct DeviceState {
  Sticky sticky;
  std::shared_ptr<Stream> legacy;                // created on first use
  std::vector<std::shared_ptr<Stream>> streams;  // live created streams (not legacy)
  std::vector<bool> peer_enabled;                // [peer]: cudaDeviceEnablePeerAccess(peer)
};

struct Enqueued {
  cudaError_t status = cudaSuccess;
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
  VectorClock vc;  // the stream's clock right after the op (what a host wait on it joins)
};

struct Runtime {
  Runtime();

  std::mutex mu;  // guards everything below except the devices' Sticky (own lock)
  int device_count;
  size_t memory_limit;  // bytes per device
  uint64_t chaos_seed;  // 0: off
  RacePolicy race_policy;
  std::vector<std::unique_ptr<DeviceState>> devices;
  MemoryRegistry memory;
  RaceDetector race;
  std::map<uintptr_t, std::shared_ptr<Stream>> streams;  // handle token -> stream
  std::map<uintptr_t, std::shared_ptr<Event>> events;    // handle token -> event
  uintptr_t next_token = 0x10000;
  int next_stream_id = 0;
  std::vector<std::string> race_reports;
  std::map<uintptr_t, size_t> pinned;  // cudaMallocHost blocks: base -> size
  std::vector<std::shared_ptr<Capture>> captures;  // in progress
  std::map<uintptr_t, GraphOps> graphs, graph_execs;  // handle token -> operations
  /// (graph exec token, lane) -> the stream its replays run that lane's ops on (Note [A
  /// graph's lanes], graphs.cc), on the lane's device; destroyed with the exec.
  std::map<std::pair<uintptr_t, int>, cudaStream_t> replay_streams;
  /// Graph exec token -> the end of its last launch (the launch stream after its final
  /// waits): the next launch, from any stream, follows it, as CUDA orders launches of one exec.
  std::map<uintptr_t, Enqueued> exec_ends;

  /// A fresh handle value: never reused, never dereferenced.
  uintptr_t new_token() { return next_token += 16; }
  std::shared_ptr<Stream> new_stream(int device, bool legacy, bool blocking);
  /// A created (not legacy) stream of `device`, registered as one of its streams, as
  /// cudaStreamCreateWithFlags makes it: its handle. Lock held.
  cudaStream_t create_stream_locked(int device, bool blocking);
  /// Unregisters the created stream `handle`, as cudaStreamDestroy does; nullptr when it is
  /// not a live one. The caller stops it (Stream::stop_and_join) outside the lock. Lock held.
  std::shared_ptr<Stream> forget_stream_locked(cudaStream_t handle);
};

Runtime& rt();

/// The calling host thread's current device (cudaSetDevice) and vector clock.
int& current_device();
VectorClock& host_clock();

/// Sets the last error to `error` with the device's sticky detail when error is that
/// device's sticky error; returns error.
cudaError_t fail(cudaError_t error, const std::string& detail);

/// Under rt().mu: checks that there is a device `device` (cudaErrorNoDevice /
/// cudaErrorInvalidDevice otherwise) and that it is not sticky (its sticky error otherwise);
/// sets the last error on failure.
cudaError_t check_device_locked(int device);

/// Under rt().mu: the stream for a handle (nullptr / cudaStreamLegacy: the legacy stream of
/// the current device). Sets the last error and returns nullptr for an invalid handle.
std::shared_ptr<Stream> resolve_stream_locked(cudaStream_t handle);

/// Under rt().mu: the event for a handle; sets the last error and returns nullptr if invalid.
std::shared_ptr<Event> find_event_locked(cudaEvent_t handle);

/// How the pointers of a request are checked.
enum class PointerRules {
  kKernel,  // device memory of the stream's device or an enabled peer; else sticky
            // cudaErrorIllegalAddress (the op is not queued)
  kCopy,    // inside one live allocation of any device; else cudaErrorInvalidValue
};

struct Request {
  cudaStream_t stream = nullptr;
  Site site;
  std::vector<Access> accesses;
  PointerRules rules = PointerRules::kKernel;
  std::string uncapturable;  // why a capture refuses it ("": it may be captured)
  std::function<void()> work;
  std::shared_ptr<EventRecord> wait;  // cudaStreamWaitEvent: wait for this record first
  /// Called under the lock once the op is committed (event records fill in their record).
  std::function<void(const std::shared_ptr<Stream>&, uint64_t seq)> on_commit;
  /// Set when the op is captured: the device of the stream that captured it, where a replay
  /// runs it (Note [Graphs over devices], graphs.cc); its lane, the capture's number for that
  /// stream (0: the origin); and the earlier ops of other lanes it follows, by their index in
  /// the graph (its own lane's earlier ops it follows by their order: Note [A graph's lanes]).
  int device = -1;
  int lane = -1;
  std::vector<size_t> after;
};

/// One stream capture in progress or ended (Note [Stream capture], graphs.cc). Guarded by the
/// runtime lock.
struct Capture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;           // the host thread that began it
  std::shared_ptr<Stream> origin;   // the stream cudaStreamBeginCapture was given
  std::vector<Request> ops;         // the captured operations, in capture order
  /// Streams forked into the capture (by waiting for an event recorded in it) -> the op count
  /// after their last captured op (at least their fork's).
  std::map<const Stream*, size_t> forked;
  /// Per stream in the capture, what its next op depends on: stream -> the op count up to
  /// which it has waited for that stream's work, directly or through other streams' events.
  /// The capture is joined when the origin's covers every forked stream's last op.
  std::map<const Stream*, std::map<const Stream*, size_t>> known;
  /// Per stream that captured an op, its lane (Note [A graph's lanes], graphs.cc).
  struct Lane {
    int number = 0;             // in order of first op; the origin's is 0
    std::vector<size_t> ops;    // indices into `ops` of its ops, ascending
    /// Another stream -> 1 + the index of its last op that this lane's ops already follow.
    std::map<const Stream*, size_t> followed;
  };
  std::map<const Stream*, Lane> lanes;
  cudaError_t invalidated = cudaSuccess;  // the first prohibited call's error
  std::string why;
  bool ended = false;
};

/// Queues a stream operation (see the picture above). On failure the status is also the
/// thread's last error.
Enqueued enqueue(Request request);

/// Host waits: for ops 1..seq of stream (joining clock `vc`), for a whole stream, for every
/// stream of a device. Return the device's sticky error (set as last error) or cudaSuccess.
cudaError_t host_wait(const std::shared_ptr<Stream>& stream, uint64_t seq,
                      const VectorClock& vc);
cudaError_t sync_stream(const std::shared_ptr<Stream>& stream);
cudaError_t sync_device(int device);

/// Under rt().mu, from enqueue() once the request's pointers are checked: what stream capture
/// makes of it (Note [Stream capture], graphs.cc). *captured: the request went into a capture
/// (or was a dependency inside one) and must not be queued. Errors are set as the last error.
cudaError_t capture_request_locked(const Request& request, const std::shared_ptr<Stream>& s,
                                   bool* captured);

/// Under rt().mu: cudaErrorStreamCaptureUnsupported (set as the last error, the captures it
/// breaks invalidated) when `api` is one CUDA forbids while a capture runs in global mode on
/// any thread or in thread-local mode on this one; cudaSuccess otherwise.
cudaError_t check_capture_unsafe_locked(const std::string& api);

/// Under rt().mu: cudaErrorStreamCaptureUnsupported (set as the last error, the capture
/// invalidated) when `s` is capturing: a host wait for or query of a capturing stream.
cudaError_t check_not_capturing_locked(const std::shared_ptr<Stream>& s, const std::string& api);

/// Counts one call of `api` (cudasim::api_counts).
void count_api(const std::string& api);

/// True when [p, p + count) lies inside one block from cudaMallocHost.
bool is_pinned_host(const void* p, size_t count);

/// cudaMalloc on `device` (not the current one); sets *ptr (nullptr for size 0).
cudaError_t device_malloc(int device, size_t size, void** ptr);
/// cudaFree: waits for the block's device, poisons and quarantines the block.
cudaError_t device_free(void* ptr);

/// Returns cudaErrorNotPermitted (set as last error) inside a cudaLaunchHostFunc callback.
#define CUDASIM_NO_CALLBACK(api)                                                      \
  do {                                                                                \
    if (::cudasim::detail::in_host_callback()) {                                      \
      return ::cudasim::set_last_error(cudaErrorNotPermitted,                         \
                                       api " called from a cudaLaunchHostFunc callback"); \
    }                                                                                 \
  } while (0)

}  // namespace cudasim::detail
