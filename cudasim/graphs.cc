// Stream capture and CUDA graphs: cudaStreamBeginCapture / EndCapture / IsCapturing,
// cudaGraphInstantiate / Launch / Destroy / ExecDestroy, and the rules CUDA enforces while a
// capture runs.
//
// Note [Stream capture]
// ~~~~~~~~~~~~~~~~~~~~~
// Between cudaStreamBeginCapture(s) and cudaStreamEndCapture(s), work issued to s is recorded,
// not run: enqueue() (context.cc) checks its pointers as usual, then hands it here, and the
// operation (its work, its pointer accesses, its text) is appended to the capture. Other
// streams join the capture by waiting for an event recorded in it (a fork) and must be waited
// for again by the origin stream before the capture ends (a join: the origin waits for an
// event recorded after the stream's last op, or for one of a stream that had waited so, and
// so on), else EndCapture fails with cudaErrorStreamCaptureUnjoined, as CUDA's does. An event
// recorded in a capture is a point of the capture, not of a stream: it orders captured work
// and nothing else.
//
// A graph is the captured operations, each with the operations it follows (Note [A graph's
// lanes]). cudaGraphLaunch(exec, stream) replays them through enqueue(): each replayed kernel
// or copy is checked by the race detector against every other stream's work and against the
// graph's other branches, like eager work.
//
// Note [A graph's lanes]
// CUDA makes a captured node follow the previous node of its stream and the last node of every
// stream that stream has waited for by events recorded in the capture, directly or through other
// streams' waits; nothing else orders two nodes. Each capturing stream is a lane here: a captured
// op keeps its lane (Request::lane) and the ops of other lanes it follows (Request::after: per
// stream in Capture::known, its last op before the bound, left out when an earlier op of the lane
// follows it already). A replay runs each lane on a stream of its own, the origin's on the launch
// stream and every other on a stream the exec keeps for it; before an op, its lane's stream waits
// for the replayed ops it follows (the first op of a lane also for the launch point and for the end
// of the exec's previous launch: CUDA runs launches of one exec one after another, whichever
// streams launch them), and after the last op the launch stream waits for every lane's last op. So
// a replay orders exactly what the graph and the launch order, its branches run concurrently as a
// GPU may run them, and two ops of one graph that touch the same bytes with no path between them
// (an event wait the capture lacked) are a race report at the replay, as they would be in eager
// work.
//
// Note [Graphs over devices]
// A capture may span devices: a stream of another device joins it by waiting for an event
// recorded in it, as any stream does, and its kernels and copies become nodes of that device
// (CUDA's multi-device graphs; a copy between devices is a node too). A lane's replay stream is
// one of its device's: a graph over devices runs each op on the device that captured it, and a
// graph of one device launched on another device's stream runs on its own device too, as
// CUDA's nodes do. A graph launched into another capture is replayed in capture order (a
// topological order of its edges) on the launch stream, which the capture turns back into
// edges; one over devices is not simulated there (the lanes' waits would cross the capture).
//
// While a capture runs, CUDA refuses what would synchronise with or allocate under it
// ("potentially unsafe API calls"): in cudaStreamCaptureModeGlobal for every thread, in
// cudaStreamCaptureModeThreadLocal for the capturing thread, in cudaStreamCaptureModeRelaxed
// never. Here those are cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost, synchronous
// cudaMemcpy, cudaDeviceSynchronize, cudaStreamSynchronize, cudaStreamQuery,
// cudaEventSynchronize and cudaEventQuery. Independently of the mode, a host wait for or query
// of a capturing stream, work on the legacy stream while a blocking stream of its device
// captures (cudaErrorStreamCaptureImplicit), a copy with pageable host memory, a
// cudaMemcpyPeerAsync or a copy between devices without peer access (a capture holds copies
// between GPUs by cudaMemcpyAsync over enabled peer access only), and a wait for
// an event recorded outside the capture (cudaErrorStreamCaptureIsolation) are errors. Every
// refusal invalidates the captures it concerns: their EndCapture returns
// cudaErrorStreamCaptureInvalidated and no graph, as CUDA's does.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cudasim/context.h"
#include "cudasim/errors.h"

namespace cudasim::detail {
namespace {

const char* mode_name(cudaStreamCaptureMode mode) {
  switch (mode) {
    case cudaStreamCaptureModeGlobal: return "global";
    case cudaStreamCaptureModeThreadLocal: return "thread-local";
    case cudaStreamCaptureModeRelaxed: return "relaxed";
  }
  return "?";
}

void invalidate_locked(Capture& c, cudaError_t error, const std::string& why) {
  if (c.invalidated != cudaSuccess) return;  // the first reason stays
  c.invalidated = error;
  c.why = why;
}

/// Ends capture `c` on every stream that is in it.
void end_capture_locked(const std::shared_ptr<Capture>& c) {
  Runtime& r = rt();
  for (const auto& d : r.devices) {
    if (d->legacy && d->legacy->capture == c) d->legacy->capture = nullptr;
    for (const auto& s : d->streams) {
      if (s->capture == c) s->capture = nullptr;
    }
  }
  std::erase(r.captures, c);
  c->ended = true;
}

}  // namespace

/// The calling thread's interaction mode (cudaThreadExchangeStreamCaptureMode): global until
/// the thread changes it.
cudaStreamCaptureMode& thread_capture_mode() {
  thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

// A thread whose own mode is relaxed may always make a potentially unsafe call; otherwise it
// may not during its own capture begun in global or thread-local mode, nor, while its mode is
// global, during another thread's capture begun in global mode (CUDA's cudaStreamCaptureMode).
cudaError_t check_capture_unsafe_locked(const std::string& api) {
  const std::thread::id me = std::this_thread::get_id();
  const cudaStreamCaptureMode thread_mode = thread_capture_mode();
  std::string why;
  for (const auto& c : rt().captures) {
    if (thread_mode == cudaStreamCaptureModeRelaxed) break;
    const bool forbidden =
        c->thread == me ? c->mode != cudaStreamCaptureModeRelaxed
                        : c->mode == cudaStreamCaptureModeGlobal &&
                              thread_mode == cudaStreamCaptureModeGlobal;
    if (!forbidden) continue;
    const std::string reason = api + " is not permitted while a stream capture in " +
                               mode_name(c->mode) + " mode is active";
    invalidate_locked(*c, cudaErrorStreamCaptureUnsupported, reason);
    if (why.empty()) why = reason;
  }
  return why.empty() ? cudaSuccess : fail(cudaErrorStreamCaptureUnsupported, why);
}

cudaError_t check_not_capturing_locked(const std::shared_ptr<Stream>& s, const std::string& api) {
  if (!s->capture) return cudaSuccess;
  const std::string why = api + " of a stream that is capturing";
  invalidate_locked(*s->capture, cudaErrorStreamCaptureUnsupported, why);
  return fail(cudaErrorStreamCaptureUnsupported, why);
}

cudaError_t capture_request_locked(const Request& req, const std::shared_ptr<Stream>& s,
                                   bool* captured) {
  *captured = false;
  Runtime& r = rt();
  const std::string what = req.site.what.empty() ? std::string("an operation") : req.site.what;
  // Work on the legacy stream synchronises with every blocking stream of its device.
  if (s->legacy) {
    for (const auto& c : r.captures) {
      for (const auto& other : r.devices[static_cast<size_t>(s->device)]->streams) {
        if (other->capture != c || !other->blocking) continue;
        const std::string why = what + " on the legacy stream while a blocking stream of device " +
                                std::to_string(s->device) + " is capturing";
        invalidate_locked(*c, cudaErrorStreamCaptureImplicit, why);
        return fail(cudaErrorStreamCaptureImplicit, why);
      }
    }
  }
  if (req.wait && req.wait->capture) {  // an event recorded inside a capture
    const std::shared_ptr<Capture>& c = req.wait->capture;
    if (c->ended) {
      return fail(cudaErrorStreamCaptureIsolation,
                  "cudaStreamWaitEvent: the event was recorded in a capture that has ended");
    }
    if (s->capture && s->capture != c) {
      invalidate_locked(*s->capture, cudaErrorStreamCaptureIsolation, "waits across captures");
      return fail(cudaErrorStreamCaptureIsolation,
                  "cudaStreamWaitEvent: the event was recorded in another capture");
    }
    if (!s->capture) {  // a fork: s joins the capture
      s->capture = c;
      c->forked[s.get()] = c->ops.size();
    }
    // s now depends on what the record saw (a join when s is the origin and the record
    // follows a forked stream's last op, directly or through other streams' waits).
    std::map<const Stream*, size_t>& known = c->known[s.get()];
    for (const auto& [stream, ops] : req.wait->seen) known[stream] = std::max(known[stream], ops);
    *captured = true;  // the replay's order keeps the dependency
    return cudaSuccess;
  }
  if (!s->capture) return cudaSuccess;
  Capture& c = *s->capture;
  if (req.wait) {
    const std::string why = "cudaStreamWaitEvent: a capturing stream waits for an event "
                            "recorded outside the capture";
    invalidate_locked(c, cudaErrorStreamCaptureIsolation, why);
    return fail(cudaErrorStreamCaptureIsolation, why);
  }
  if (c.invalidated != cudaSuccess) {
    return fail(cudaErrorStreamCaptureInvalidated,
                what + ": the capture was invalidated: " + c.why);
  }
  if (!req.uncapturable.empty()) {
    invalidate_locked(c, cudaErrorStreamCaptureUnsupported, req.uncapturable);
    return fail(cudaErrorStreamCaptureUnsupported, req.uncapturable);
  }
  const size_t index = c.ops.size();
  c.ops.push_back(req);
  Request& op = c.ops.back();
  op.device = s->device;
  op.after.clear();  // a replayed op captured again: its edges were the other graph's
  // Its lane and the edges CUDA would give it (Note [A graph's lanes]).
  const auto [at, is_new] = c.lanes.try_emplace(s.get());
  Capture::Lane& lane = at->second;
  if (is_new && s != c.origin) {  // numbered 1, 2, ... in order of first op
    lane.number = static_cast<int>(c.lanes.size() - c.lanes.count(c.origin.get()));
  }
  op.lane = lane.number;
  for (const auto& [stream, bound] : c.known[s.get()]) {
    const auto theirs = c.lanes.find(stream);
    if (stream == s.get() || theirs == c.lanes.end()) continue;
    const std::vector<size_t>& their_ops = theirs->second.ops;
    const auto first_after = std::lower_bound(their_ops.begin(), their_ops.end(), bound);
    if (first_after == their_ops.begin()) continue;  // it waited before that stream's first op
    const size_t last_before = *std::prev(first_after);
    size_t& followed = lane.followed[stream];
    if (last_before + 1 <= followed) continue;  // an earlier op of the lane follows it
    followed = last_before + 1;
    op.after.push_back(last_before);
  }
  lane.ops.push_back(index);
  if (s != c.origin) {
    c.forked[s.get()] = c.ops.size();
  }
  *captured = true;
  return cudaSuccess;
}

}  // namespace cudasim::detail

using namespace cudasim::detail;  // NOLINT: the C API below is all the rest of this file is

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  count_api("cudaStreamBeginCapture");
  CUDASIM_NO_CALLBACK("cudaStreamBeginCapture");
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed) {
    return fail(cudaErrorInvalidValue,
                "cudaStreamBeginCapture: mode " + std::to_string(static_cast<int>(mode)));
  }
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<Stream> s = resolve_stream_locked(stream);
  if (!s) return peek_last_error();
  if (const cudaError_t status = check_device_locked(s->device); status != cudaSuccess) {
    return status;
  }
  if (s->legacy) {
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamBeginCapture: the legacy default stream cannot be captured (create "
                "a stream)");
  }
  if (s->capture) {
    return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
  }
  auto c = std::make_shared<Capture>();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  s->capture = c;
  r.captures.push_back(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  count_api("cudaStreamEndCapture");
  CUDASIM_NO_CALLBACK("cudaStreamEndCapture");
  if (graph == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamEndCapture: pGraph is null");
  *graph = nullptr;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  std::shared_ptr<Stream> s = resolve_stream_locked(stream);
  if (!s) return peek_last_error();
  const std::shared_ptr<Capture> c = s->capture;
  if (!c) return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
  if (c->origin != s) {
    return fail(cudaErrorStreamCaptureUnmatched,
                "cudaStreamEndCapture: the capture began on another stream");
  }
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id()) {
    return fail(cudaErrorStreamCaptureWrongThread,
                "cudaStreamEndCapture: called from a thread other than the one that began the "
                "capture");
  }
  end_capture_locked(c);
  if (c->invalidated != cudaSuccess) {
    return fail(cudaErrorStreamCaptureInvalidated,
                "cudaStreamEndCapture: the capture was invalidated: " + c->why);
  }
  const std::map<const Stream*, size_t>& joined = c->known[c->origin.get()];
  for (const auto& [forked, ops] : c->forked) {
    const auto it = joined.find(forked);
    if (it == joined.end() || it->second < ops) {
      return fail(cudaErrorStreamCaptureUnjoined,
                  "cudaStreamEndCapture: a stream forked into the capture (by waiting for an "
                  "event recorded in it) was not joined back: the capturing stream must wait "
                  "for an event recorded on it after its last operation");
    }
  }
  const uintptr_t token = r.new_token();
  r.graphs[token] = std::make_shared<const std::vector<Request>>(std::move(c->ops));
  *graph = reinterpret_cast<cudaGraph_t>(token);
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) {
    return fail(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: mode is null");
  }
  // The caller's value read as its bits: a value no enumerator has may lie outside the
  // enum's range, and loading it as the enum would be undefined (UBSan's -fsanitize=enum).
  static_assert(sizeof(cudaStreamCaptureMode) == sizeof(int));
  int raw = 0;
  std::memcpy(&raw, mode, sizeof raw);
  if (raw != cudaStreamCaptureModeGlobal && raw != cudaStreamCaptureModeThreadLocal &&
      raw != cudaStreamCaptureModeRelaxed) {
    return fail(cudaErrorInvalidValue,
                "cudaThreadExchangeStreamCaptureMode: mode " + std::to_string(raw));
  }
  std::swap(*mode, thread_capture_mode());
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return fail(cudaErrorInvalidValue, "pCaptureStatus is null");
  std::lock_guard<std::mutex> lock(rt().mu);
  std::shared_ptr<Stream> s = resolve_stream_locked(stream);
  if (!s) return peek_last_error();
  *status = !s->capture                                 ? cudaStreamCaptureStatusNone
            : s->capture->invalidated != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                                     : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  count_api("cudaGraphInstantiate");
  CUDASIM_NO_CALLBACK("cudaGraphInstantiate");
  if (exec == nullptr) {
    return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: pGraphExec is null");
  }
  if (flags != 0) {
    return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: flags " + std::to_string(flags) +
                                           " are not simulated (0 only)");
  }
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.graphs.find(reinterpret_cast<uintptr_t>(graph));
  if (it == r.graphs.end()) {
    return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: not a live graph");
  }
  const uintptr_t token = r.new_token();
  r.graph_execs[token] = it->second;  // operations are immutable: instances share them
  *exec = reinterpret_cast<cudaGraphExec_t>(token);
  return cudaSuccess;
}

namespace {

/// The stream replays of `exec` run `lane`'s ops on (Note [A graph's lanes]): made on first use
/// on the lane's device, non-blocking, one of the device's streams (a device synchronisation
/// waits for it). Runtime lock held.
cudaStream_t replay_stream_locked(uintptr_t exec, int lane, int device) {
  cudaStream_t& handle = rt().replay_streams[{exec, lane}];
  if (handle == nullptr) handle = rt().create_stream_locked(device, /*blocking=*/false);
  return handle;
}

/// `stream` waits for `op` (a stream and its op count, as an event recorded after it).
cudaError_t wait_for_op(cudaStream_t stream, const Enqueued& op) {
  auto record = std::make_shared<EventRecord>();
  record->stream = op.stream;
  record->seq = op.seq;
  record->vc = op.vc;
  Request req;
  req.stream = stream;
  req.site.what = "cudaGraphLaunch (a replay's edge between lanes)";
  req.wait = std::move(record);
  return enqueue(std::move(req)).status;
}

/// The point after `s`'s work issued so far, as a wait for it sees it. Runtime lock held.
Enqueued issued_so_far_locked(const std::shared_ptr<Stream>& s) {
  return {cudaSuccess, s, s->enqueued, s->vc};
}

/// Where one replay runs a lane.
struct LaneReplay {
  cudaStream_t handle = nullptr;
  std::shared_ptr<Stream> stream;
  Enqueued last;  // its last replayed op (stream unset until the first)
};

}  // namespace

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  count_api("cudaGraphLaunch");
  CUDASIM_NO_CALLBACK("cudaGraphLaunch");
  GraphOps ops;
  Enqueued launch_point;   // the launch stream's work before the launch
  Enqueued previous_end;   // the exec's last launch (stream unset when none)
  std::shared_ptr<Stream> launch;
  std::vector<LaneReplay> lanes;
  {
    Runtime& r = rt();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto token = reinterpret_cast<uintptr_t>(exec);
    const auto it = r.graph_execs.find(token);
    if (it == r.graph_execs.end()) {
      return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: not a live graph exec");
    }
    ops = it->second;
    launch = resolve_stream_locked(stream);
    if (!launch) return peek_last_error();
    if (const auto end = r.exec_ends.find(token); end != r.exec_ends.end()) {
      previous_end = end->second;
    }
    for (const Request& op : *ops) {
      const auto number = static_cast<size_t>(op.lane);
      if (number >= lanes.size()) lanes.resize(number + 1);
      LaneReplay& lane = lanes[number];
      if (lane.stream) continue;
      if (launch->capture) {  // in capture order on the launch stream (Note [Graphs over devices])
        if (op.device != launch->device) {
          return fail(cudaErrorStreamCaptureUnsupported,
                      "cudaGraphLaunch: a graph over several devices launched into a capture "
                      "(not simulated)");
        }
        lane.handle = stream;
      } else if (op.lane == 0 && op.device == launch->device) {
        lane.handle = stream;
      } else {
        lane.handle = replay_stream_locked(token, op.lane, op.device);
      }
      lane.stream = resolve_stream_locked(lane.handle);
    }
    launch_point = issued_so_far_locked(launch);
  }
  // Each op on its lane's stream, after what it follows (Note [A graph's lanes]); into the
  // launch stream's capture if it has one.
  std::vector<Enqueued> done(ops->size());
  for (size_t i = 0; i < ops->size(); ++i) {
    const Request& op = (*ops)[i];
    LaneReplay& lane = lanes[static_cast<size_t>(op.lane)];
    std::vector<const Enqueued*> follows;
    if (!lane.last.stream) {  // a root: after the launch point and the exec's last launch
      follows.push_back(&launch_point);
      if (previous_end.stream && !launch->capture) follows.push_back(&previous_end);
    }
    for (const size_t j : op.after) follows.push_back(&done[j]);
    for (const Enqueued* before : follows) {
      if (before->stream == lane.stream) continue;  // the stream's own order
      if (const cudaError_t status = wait_for_op(lane.handle, *before); status != cudaSuccess) {
        return status;
      }
    }
    Request replay = op;
    replay.stream = lane.handle;
    done[i] = enqueue(std::move(replay));
    if (done[i].status != cudaSuccess) return done[i].status;
    lane.last = done[i];
  }
  for (const LaneReplay& lane : lanes) {
    if (!lane.last.stream || lane.handle == stream) continue;
    if (const cudaError_t status = wait_for_op(stream, lane.last); status != cudaSuccess) {
      return status;
    }
  }
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.graph_execs.count(reinterpret_cast<uintptr_t>(exec)) != 0 && !launch->capture) {
    r.exec_ends[reinterpret_cast<uintptr_t>(exec)] = issued_so_far_locked(launch);
  }
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::vector<std::shared_ptr<Stream>> replay_streams;  // stopped outside the lock
  {
    Runtime& r = rt();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto token = reinterpret_cast<uintptr_t>(exec);
    if (r.graph_execs.erase(token) == 0) {
      return fail(cudaErrorInvalidValue, "cudaGraphExecDestroy: not a live graph exec");
    }
    r.exec_ends.erase(token);
    for (auto it = r.replay_streams.begin(); it != r.replay_streams.end();) {
      if (it->first.first != token) {
        ++it;
        continue;
      }
      if (std::shared_ptr<Stream> s = r.forget_stream_locked(it->second)) {
        replay_streams.push_back(std::move(s));
      }
      it = r.replay_streams.erase(it);
    }
  }
  for (const auto& s : replay_streams) s->stop_and_join();  // their queued work still runs
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::mutex> lock(rt().mu);
  if (rt().graphs.erase(reinterpret_cast<uintptr_t>(graph)) == 0) {
    return fail(cudaErrorInvalidValue, "cudaGraphDestroy: not a live graph");
  }
  return cudaSuccess;
}
