// The CUDA runtime's event functions: create/destroy, record (a stream op that snapshots the
// stream's vector clock), query/synchronize (host waits that join it), elapsed time.
#include <chrono>
#include <cstdio>

#include "cudasim/context.h"
#include "cudasim/errors.h"

using namespace cudasim::detail;  // NOLINT: the C API below is all this file is

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// ---- events --------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  count_api("cudaEventCreateWithFlags");
  CUDASIM_NO_CALLBACK("cudaEventCreateWithFlags");
  if (event == nullptr) return fail(cudaErrorInvalidValue, "event is null");
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~known) != 0) return fail(cudaErrorInvalidValue, "event flags");
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  const int device = current_device();
  const cudaError_t status = check_device_locked(device);
  if (status != cudaSuccess) return status;
  auto e = std::make_shared<Event>();
  e->device = device;
  e->flags = flags;
  const uintptr_t token = r.new_token();
  r.events[token] = e;
  *event = reinterpret_cast<cudaEvent_t>(token);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  count_api("cudaEventDestroy");
  CUDASIM_NO_CALLBACK("cudaEventDestroy");
  std::lock_guard<std::mutex> lock(rt().mu);
  if (rt().events.erase(reinterpret_cast<uintptr_t>(event)) == 0) {
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
  }
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  count_api("cudaEventRecord");
  CUDASIM_NO_CALLBACK("cudaEventRecord");
  std::shared_ptr<Event> e;
  {
    std::lock_guard<std::mutex> lock(rt().mu);
    e = find_event_locked(event);
    if (!e) return cudaErrorInvalidResourceHandle;
    std::shared_ptr<Stream> s = resolve_stream_locked(stream);
    if (!s) return peek_last_error();
    if (s->device != e->device) {
      return fail(cudaErrorInvalidResourceHandle,
                  "cudaEventRecord: event of device " + std::to_string(e->device) +
                      " recorded on a stream of device " + std::to_string(s->device));
    }
    if (s->capture) {  // a point of the capture (Note [Stream capture], graphs.cc)
      if (s->capture->invalidated != cudaSuccess) {
        return fail(cudaErrorStreamCaptureInvalidated,
                    "cudaEventRecord: the capture was invalidated: " + s->capture->why);
      }
      auto record = std::make_shared<EventRecord>();
      record->capture = s->capture;
      record->seen = s->capture->known[s.get()];
      record->seen[s.get()] = s->capture->ops.size();
      e->last = record;
      return cudaSuccess;
    }
  }
  auto record = std::make_shared<EventRecord>();
  Request req;
  req.stream = stream;
  req.site.what = "cudaEventRecord";
  req.work = [record] { record->time_ns.store(now_ns()); };
  req.on_commit = [record, e](const std::shared_ptr<Stream>& s, uint64_t seq) {
    record->stream = s;
    record->seq = seq;
    record->vc = s->vc;
    e->last = record;  // re-recording replaces the previous record
  };
  return enqueue(std::move(req)).status;
}

namespace {

// The event's latest record (nullptr: never recorded), or an error status.
// host_waits: the call waits for or queries the record (CUDA forbids that during a capture,
// Note [Stream capture], graphs.cc); cudaEventElapsedTime only reads its time.
cudaError_t latest_record(const char* api, bool host_waits, cudaEvent_t event,
                          std::shared_ptr<Event>* e, std::shared_ptr<EventRecord>* record) {
  std::lock_guard<std::mutex> lock(rt().mu);
  *e = find_event_locked(event);
  if (!*e) return cudaErrorInvalidResourceHandle;
  *record = (*e)->last;
  if (*record && (*record)->capture) {
    return fail(cudaErrorStreamCaptureUnsupported,
                std::string(api) + ": the event was recorded in a stream capture (a point of "
                                   "the graph, not of a stream)");
  }
  if (host_waits) {
    if (const cudaError_t status = check_capture_unsafe_locked(api); status != cudaSuccess) {
      return status;
    }
  }
  return check_device_locked((*e)->device);
}

}  // namespace

cudaError_t cudaEventQuery(cudaEvent_t event) {
  CUDASIM_NO_CALLBACK("cudaEventQuery");
  std::shared_ptr<Event> e;
  std::shared_ptr<EventRecord> record;
  const cudaError_t status = latest_record("cudaEventQuery", true, event, &e, &record);
  if (status != cudaSuccess || !record) return status;
  if (!record->stream->done(record->seq)) return cudaErrorNotReady;  // not the last error
  return host_wait(record->stream, record->seq, record->vc);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  count_api("cudaEventSynchronize");
  CUDASIM_NO_CALLBACK("cudaEventSynchronize");
  std::shared_ptr<Event> e;
  std::shared_ptr<EventRecord> record;
  const cudaError_t status = latest_record("cudaEventSynchronize", true, event, &e, &record);
  if (status != cudaSuccess || !record) return status;
  return host_wait(record->stream, record->seq, record->vc);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  CUDASIM_NO_CALLBACK("cudaEventElapsedTime");
  if (ms == nullptr) return fail(cudaErrorInvalidValue, "ms is null");
  std::shared_ptr<Event> e[2];
  std::shared_ptr<EventRecord> record[2];
  for (int i = 0; i < 2; ++i) {
    const cudaError_t status =
        latest_record("cudaEventElapsedTime", false, i == 0 ? start : end, &e[i], &record[i]);
    if (status != cudaSuccess) return status;
    if ((e[i]->flags & cudaEventDisableTiming) != 0) {
      return fail(cudaErrorInvalidResourceHandle,
                  "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
    }
    if (!record[i]) {
      return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event never recorded");
    }
  }
  for (const auto& rec : record) {
    if (!rec->stream->done(rec->seq)) return cudaErrorNotReady;
  }
  *ms = static_cast<float>(static_cast<double>(record[1]->time_ns.load() -
                                               record[0]->time_ns.load()) / 1e6);
  return cudaSuccess;
}
