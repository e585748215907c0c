#include "cudasim/context.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cudasim/errors.h"

namespace cudasim::detail {
namespace {

long env_long(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return end != text && value >= 0 ? value : fallback;
}

RacePolicy env_policy() {
  const char* text = std::getenv("PIPEWRIGHT_CUDASIM_RACES");
  return text != nullptr && std::strcmp(text, "report") == 0 ? RacePolicy::kReport
                                                             : RacePolicy::kError;
}

std::string pointer_text(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

}  // namespace

Runtime::Runtime()
    : device_count(static_cast<int>(env_long("PIPEWRIGHT_CUDASIM_DEVICES", 2))),
      memory_limit(static_cast<size_t>(env_long("PIPEWRIGHT_CUDASIM_MEMORY_MB", 4096)) << 20),
      chaos_seed(static_cast<uint64_t>(env_long("PIPEWRIGHT_CUDASIM_CHAOS", 0))),
      race_policy(env_policy()),
      memory(device_count) {
  for (int d = 0; d < device_count; ++d) {
    devices.push_back(std::make_unique<DeviceState>());
    devices.back()->peer_enabled.assign(static_cast<size_t>(device_count), false);
  }
}

std::shared_ptr<Stream> Runtime::new_stream(int device, bool legacy, bool blocking) {
  DeviceState& d = *devices[static_cast<size_t>(device)];
  return std::make_shared<Stream>(next_stream_id++, device, legacy, blocking, &d.sticky,
                                  chaos_seed);
}

cudaStream_t Runtime::create_stream_locked(int device, bool blocking) {
  std::shared_ptr<Stream> s = new_stream(device, /*legacy=*/false, blocking);
  const uintptr_t token = new_token();
  streams[token] = s;
  devices[static_cast<size_t>(device)]->streams.push_back(s);
  return reinterpret_cast<cudaStream_t>(token);
}

std::shared_ptr<Stream> Runtime::forget_stream_locked(cudaStream_t handle) {
  const auto it = streams.find(reinterpret_cast<uintptr_t>(handle));
  if (it == streams.end()) return nullptr;
  std::shared_ptr<Stream> s = it->second;
  streams.erase(it);
  std::erase(devices[static_cast<size_t>(s->device)]->streams, s);
  return s;
}

Runtime& rt() {
  static Runtime* runtime = new Runtime();  // leaked: worker threads outlive main
  return *runtime;
}

int& current_device() {
  thread_local int device = 0;
  return device;
}

VectorClock& host_clock() {
  thread_local VectorClock clock;
  return clock;
}

cudaError_t fail(cudaError_t error, const std::string& detail) {
  return set_last_error(error, detail);
}

cudaError_t check_device_locked(int device) {
  Runtime& r = rt();
  if (r.device_count == 0) return fail(cudaErrorNoDevice, "PIPEWRIGHT_CUDASIM_DEVICES=0");
  if (device < 0 || device >= r.device_count) {
    return fail(cudaErrorInvalidDevice, "device " + std::to_string(device) + " of " +
                                            std::to_string(r.device_count) + " simulated");
  }
  std::string detail;
  const cudaError_t sticky = r.devices[static_cast<size_t>(device)]->sticky.get(&detail);
  if (sticky != cudaSuccess) return fail(sticky, detail);
  return cudaSuccess;
}

std::shared_ptr<Stream> resolve_stream_locked(cudaStream_t handle) {
  Runtime& r = rt();
  if (handle == nullptr || handle == cudaStreamLegacy) {
    const int device = current_device();
    if (check_device_locked(device) != cudaSuccess) return nullptr;
    DeviceState& d = *r.devices[static_cast<size_t>(device)];
    if (!d.legacy) d.legacy = r.new_stream(device, /*legacy=*/true, /*blocking=*/true);
    return d.legacy;
  }
  if (handle == cudaStreamPerThread) {
    fail(cudaErrorInvalidResourceHandle, "cudaStreamPerThread is not simulated");
    return nullptr;
  }
  auto it = r.streams.find(reinterpret_cast<uintptr_t>(handle));
  if (it == r.streams.end()) {
    fail(cudaErrorInvalidResourceHandle,
         "stream " + pointer_text(handle) + " is not a live stream (destroyed or never created)");
    return nullptr;
  }
  if (check_device_locked(it->second->device) != cudaSuccess) return nullptr;
  return it->second;
}

std::shared_ptr<Event> find_event_locked(cudaEvent_t handle) {
  auto it = rt().events.find(reinterpret_cast<uintptr_t>(handle));
  if (it != rt().events.end()) return it->second;
  char text[96];
  std::snprintf(text, sizeof text, "event %p is not a live event (destroyed or never created)",
                static_cast<void*>(handle));
  fail(cudaErrorInvalidResourceHandle, text);
  return nullptr;
}

namespace {

struct Checked {
  const Allocation* alloc = nullptr;
  size_t begin = 0, end = 0;
};

// Checks one access; returns "" when fine, else why not.
std::string check_access(const Access& a, PointerRules rules, const Stream& s, Checked* out) {
  Runtime& r = rt();
  const Allocation* live =
      r.memory.find_live(a.ptr, /*include_end=*/rules == PointerRules::kKernel);
  if (live == nullptr) {
    const Allocation* freed = r.memory.find_freed(a.ptr);
    if (freed != nullptr) return "freed memory: " + freed->describe(/*with_sites=*/true);
    return "not device memory (host memory or an unknown address)";
  }
  const size_t begin = static_cast<size_t>(static_cast<const char*>(a.ptr) - live->base);
  const size_t end = a.bytes == Access::kToEnd ? live->size : begin + a.bytes;
  if (a.bytes != Access::kToEnd && (a.bytes > live->size || end > live->size)) {
    return std::to_string(a.bytes) + " B from offset " + std::to_string(begin) +
           " pass the end of " + live->describe(true);
  }
  if (rules == PointerRules::kKernel && live->device != s.device &&
      !r.devices[static_cast<size_t>(s.device)]->peer_enabled[static_cast<size_t>(live->device)]) {
    return "memory of device " + std::to_string(live->device) + " but device " +
           std::to_string(s.device) + " has not enabled peer access to it (" +
           live->describe(false) + ")";
  }
  *out = Checked{live, begin, end};
  return "";
}

std::string site_text(const Site& site) {
  std::string text = site.what;
  if (site.file != nullptr) text += " at " + std::string(site.file) + ":" + std::to_string(site.line);
  return text;
}

}  // namespace

Enqueued enqueue(Request req) {
  Enqueued result;
  auto info = std::make_shared<OpInfo>();
  info->what = site_text(req.site);
  info->backtrace = Backtrace::capture();  // outside the lock: cheap but not free

  Runtime& r = rt();
  std::vector<std::string> reports;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    std::shared_ptr<Stream> s = resolve_stream_locked(req.stream);
    if (!s) {
      result.status = peek_last_error();
      return result;
    }
    info->stream_id = s->id;
    info->device = s->device;
    info->legacy = s->legacy;
    DeviceState& d = *r.devices[static_cast<size_t>(s->device)];

    // Pointers.
    std::vector<Checked> checked(req.accesses.size());
    for (size_t i = 0; i < req.accesses.size(); ++i) {
      const Access& a = req.accesses[i];
      if (a.ptr == nullptr) continue;
      const std::string why = check_access(a, req.rules, *s, &checked[i]);
      if (why.empty()) continue;
      std::ostringstream detail;
      detail << info->what << ": " << (a.arg >= 0 ? "argument " + std::to_string(a.arg) : "pointer")
             << " " << a.ptr << " is " << why;
      if (req.rules == PointerRules::kKernel) {
        d.sticky.set(cudaErrorIllegalAddress, detail.str());
        result.status = fail(cudaErrorIllegalAddress, detail.str());
      } else {
        result.status = fail(cudaErrorInvalidValue, detail.str());
      }
      return result;
    }

    // Stream capture: the request may go into a graph instead of the stream.
    bool captured = false;
    if (const cudaError_t status = capture_request_locked(req, s, &captured);
        status != cudaSuccess || captured) {
      result.status = status;
      result.stream = s;
      return result;
    }

    // Clocks and dependencies (Note [Race detection]).
    std::vector<Dep> deps;
    VectorClock vc = s->vc;
    vc.join(host_clock());
    if (s->legacy) {
      for (const auto& b : d.streams) {
        if (!b->blocking || b->enqueued == 0) continue;
        deps.push_back({b, b->enqueued});
        vc.join(b->vc);
      }
    } else if (s->blocking && d.legacy && d.legacy->enqueued > 0) {
      deps.push_back({d.legacy, d.legacy->enqueued});
      vc.join(d.legacy->vc);
    }
    if (req.wait) {
      deps.push_back({req.wait->stream, req.wait->seq});
      vc.join(req.wait->vc);
    }
    const uint64_t seq = s->enqueued + 1;
    vc.set(static_cast<size_t>(s->id), seq);

    // Races.
    std::vector<AccessRecord> records;
    for (size_t i = 0; i < req.accesses.size(); ++i) {
      if (checked[i].alloc == nullptr) continue;
      const Access& a = req.accesses[i];
      AccessRecord rec{s->id, seq, checked[i].begin, checked[i].end, a.write, a.arg, info};
      for (std::string& report :
           r.race.check(checked[i].alloc->id, checked[i].alloc->describe(false), rec, vc)) {
        reports.push_back(std::move(report));
      }
      records.push_back(std::move(rec));
    }
    for (const std::string& report : reports) r.race_reports.push_back(report);
    if (!reports.empty() && r.race_policy == RacePolicy::kError) {
      std::string all;
      for (const std::string& report : reports) all += (all.empty() ? "" : "\n") + report;
      std::fprintf(stderr, "%s\n", all.c_str());
      result.status = fail(cudaErrorIllegalState, all);
      return result;
    }

    // Commit.
    s->vc = vc;
    s->enqueued = seq;
    for (size_t i = 0, j = 0; i < req.accesses.size(); ++i) {
      if (checked[i].alloc == nullptr) continue;
      r.race.record(checked[i].alloc->id, std::move(records[j++]), vc);
    }
    if (req.on_commit) req.on_commit(s, seq);
    s->push(Op{seq, std::move(deps), std::move(req.work), info->what});
    result.stream = s;
    result.seq = seq;
    result.vc = vc;
  }
  for (const std::string& report : reports) std::fprintf(stderr, "%s\n", report.c_str());
  return result;
}

cudaError_t host_wait(const std::shared_ptr<Stream>& stream, uint64_t seq,
                      const VectorClock& vc) {
  stream->wait_for(seq);
  host_clock().join(vc);
  std::string detail;
  const cudaError_t sticky = rt().devices[static_cast<size_t>(stream->device)]->sticky.get(&detail);
  return sticky == cudaSuccess ? sticky : fail(sticky, detail);
}

cudaError_t sync_stream(const std::shared_ptr<Stream>& stream) {
  uint64_t seq;
  VectorClock vc;
  {
    std::lock_guard<std::mutex> lock(rt().mu);
    seq = stream->enqueued;
    vc = stream->vc;
  }
  return host_wait(stream, seq, vc);
}

cudaError_t sync_device(int device) {
  Runtime& r = rt();
  std::vector<std::shared_ptr<Stream>> streams;
  std::vector<uint64_t> seqs;
  VectorClock vc;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    DeviceState& d = *r.devices[static_cast<size_t>(device)];
    streams = d.streams;
    if (d.legacy) streams.push_back(d.legacy);
    for (const auto& s : streams) {
      seqs.push_back(s->enqueued);
      vc.join(s->vc);
    }
  }
  for (size_t i = 0; i < streams.size(); ++i) streams[i]->wait_for(seqs[i]);
  host_clock().join(vc);
  std::string detail;
  const cudaError_t sticky = r.devices[static_cast<size_t>(device)]->sticky.get(&detail);
  return sticky == cudaSuccess ? sticky : fail(sticky, detail);
}

}  // namespace cudasim::detail

namespace cudasim {

RacePolicy set_race_policy(RacePolicy policy) {
  std::lock_guard<std::mutex> lock(detail::rt().mu);
  const RacePolicy previous = detail::rt().race_policy;
  detail::rt().race_policy = policy;
  return previous;
}

std::vector<std::string> take_race_reports() {
  std::lock_guard<std::mutex> lock(detail::rt().mu);
  std::vector<std::string> reports;
  reports.swap(detail::rt().race_reports);
  return reports;
}

void reset_device(int device) {
  detail::Runtime& r = detail::rt();
  if (device < 0 || device >= r.device_count) return;
  (void)detail::sync_device(device);
  r.devices[static_cast<size_t>(device)]->sticky.clear();
  (void)detail::take_last_error();
}

int simulated_device_count() { return detail::rt().device_count; }

namespace {

struct ApiCounts {
  std::mutex mu;
  std::map<std::string, int64_t> counts;
};

ApiCounts& api_counter() {
  static ApiCounts* counts = new ApiCounts();  // leaked, like the runtime
  return *counts;
}

}  // namespace

std::map<std::string, int64_t> api_counts() {
  ApiCounts& c = api_counter();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.counts;
}

void reset_api_counts() {
  ApiCounts& c = api_counter();
  std::lock_guard<std::mutex> lock(c.mu);
  c.counts.clear();
}

namespace detail {

void count_api(const std::string& api) {
  ApiCounts& c = api_counter();
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.counts[api];
}

bool is_pinned_host(const void* p, size_t count) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = r.pinned.upper_bound(address);
  if (it == r.pinned.begin()) return false;
  --it;
  return address - it->first + count <= it->second;
}

}  // namespace detail

}  // namespace cudasim
