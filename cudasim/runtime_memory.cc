// The CUDA runtime's memory functions: cudaMalloc, cudaFree, cudaMemcpy(Async), peer copies,
// cudaMemsetAsync. Copies are validated against the registry (memory.h): each device range
// must lie inside one live allocation and match the copy kind.
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cudasim/context.h"
#include "cudasim/errors.h"

using namespace cudasim::detail;  // NOLINT: the C API below is all this file is

namespace cudasim::detail {

cudaError_t device_malloc(int device, size_t size, void** ptr) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  const cudaError_t status = check_device_locked(device);
  if (status != cudaSuccess) return status;
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  const Allocation* a = r.memory.allocate(device, size, r.memory_limit);
  if (a == nullptr) {
    return fail(cudaErrorMemoryAllocation,
                "cudaMalloc of " + std::to_string(size) + " B on device " +
                    std::to_string(device) + ": " + std::to_string(r.memory.used(device)) +
                    " B in use of " + std::to_string(r.memory_limit) +
                    " B (PIPEWRIGHT_CUDASIM_MEMORY_MB)");
  }
  r.race.forget(a->id);
  *ptr = a->base;
  return cudaSuccess;
}

cudaError_t device_free(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Runtime& r = rt();
  int device;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    const Allocation* a = r.memory.find_base(ptr);
    if (a == nullptr) {
      std::ostringstream why;
      why << "cudaFree(" << ptr << "): ";
      if (const Allocation* f = r.memory.find_freed(ptr)) {
        why << "already freed: " << f->describe(/*with_sites=*/true);
      } else if (const Allocation* l = r.memory.find_live(ptr)) {
        why << "not the start of " << l->describe(false);
      } else {
        why << "not a device allocation";
      }
      return fail(cudaErrorInvalidValue, why.str());
    }
    device = a->device;
    const cudaError_t status = check_device_locked(device);
    if (status != cudaSuccess) return status;
  }
  const cudaError_t status = sync_device(device);  // cudaFree synchronises, as on CUDA
  if (status != cudaSuccess) return status;
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.memory.find_base(ptr) == nullptr) {
    return fail(cudaErrorInvalidValue, "cudaFree: freed concurrently by another thread");
  }
  r.race.forget(r.memory.release(ptr));
  return cudaSuccess;
}

}  // namespace cudasim::detail

namespace {

/// check_capture_unsafe_locked under the runtime lock (Note [Stream capture], graphs.cc).
cudaError_t check_capture_unsafe(const char* api) {
  std::lock_guard<std::mutex> lock(rt().mu);
  return check_capture_unsafe_locked(api);
}

enum class Where { kHost, kDevice, kBad };

struct Place {
  Where where = Where::kHost;
  int device = -1;
  std::string why;  // kBad
};

Place classify(const void* p, size_t count) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  std::ostringstream why;
  if (const Allocation* a = r.memory.find_live(p)) {
    const size_t offset = static_cast<size_t>(static_cast<const char*>(p) - a->base);
    if (count <= a->size - offset) return {Where::kDevice, a->device, ""};
    why << p << " + " << count << " B passes the end of " << a->describe(true);
    return {Where::kBad, a->device, why.str()};
  }
  if (const Allocation* f = r.memory.find_freed(p)) {
    why << p << " is freed memory: " << f->describe(true);
    return {Where::kBad, f->device, why.str()};
  }
  return {};
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
  }
  return "?";
}

// Validates, then runs a copy on `stream`. synchronous: cudaMemcpy (host waits, except for
// device-to-device copies, which CUDA leaves asynchronous to the host).
cudaError_t copy(const char* api, void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                 cudaStream_t stream, bool synchronous) {
  count_api(std::string(api) + " " + kind_name(kind));
  CUDASIM_NO_CALLBACK("cudaMemcpy");
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return fail(cudaErrorInvalidMemcpyDirection, std::string(api) + ": kind " +
                                                     std::to_string(static_cast<int>(kind)));
  }
  const std::string what = std::string(api) + " " + kind_name(kind) + " " +
                           std::to_string(count) + " B";
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue, what + ": null pointer");
  const Place d = classify(dst, count), s = classify(src, count);
  if (d.where == Where::kBad) return fail(cudaErrorInvalidValue, what + ": destination " + d.why);
  if (s.where == Where::kBad) return fail(cudaErrorInvalidValue, what + ": source " + s.why);
  const bool dst_dev = d.where == Where::kDevice, src_dev = s.where == Where::kDevice;
  auto mismatch = [&](const char* which, const void* p, bool is_device) {
    std::ostringstream out;
    out << what << ": " << which << " " << p << " is " << (is_device ? "device" : "host")
        << " memory";
    return fail(cudaErrorInvalidValue, out.str());
  };
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) {
    if (src_dev) return mismatch("source", src, true);
  } else if (kind != cudaMemcpyDefault && !src_dev) {
    return mismatch("source", src, false);
  }
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) {
    if (dst_dev) return mismatch("destination", dst, true);
  } else if (kind != cudaMemcpyDefault && !dst_dev) {
    return mismatch("destination", dst, false);
  }
  if (synchronous) {
    if (const cudaError_t status = check_capture_unsafe(api); status != cudaSuccess) {
      return status;
    }
  }
  if (!src_dev && !dst_dev) {  // host to host: synchronous on CUDA too
    std::memmove(dst, src, count);
    return cudaSuccess;
  }
  Request req;
  req.stream = stream;
  req.site.what = what;
  req.rules = PointerRules::kCopy;
  // What a capture refuses (Note [Stream capture], graphs.cc): pageable host memory; between
  // devices, anything but a copy by unified addresses over enabled peer access.
  if ((!src_dev && !is_pinned_host(src, count)) || (!dst_dev && !is_pinned_host(dst, count))) {
    req.uncapturable = what + ": a copy with pageable host memory cannot be captured";
  } else if (std::strcmp(api, "cudaMemcpyPeerAsync") == 0) {
    req.uncapturable = what + ": cudaMemcpyPeerAsync cannot be captured (cudaMemcpyAsync "
                              "between devices with peer access enabled can)";
  } else if (src_dev && dst_dev && s.device != d.device) {
    std::lock_guard<std::mutex> lock(rt().mu);
    const auto& devices = rt().devices;
    if (!devices[static_cast<size_t>(s.device)]->peer_enabled[static_cast<size_t>(d.device)] ||
        !devices[static_cast<size_t>(d.device)]->peer_enabled[static_cast<size_t>(s.device)]) {
      req.uncapturable = what + ": a copy between devices without peer access enabled both "
                                "ways cannot be captured";
    }
  }
  if (src_dev) req.accesses.push_back({src, count, /*write=*/false});
  if (dst_dev) req.accesses.push_back({dst, count, /*write=*/true});
  if (!src_dev && is_pinned_host(src, count)) {
    // Pinned host source: read when the stream runs the copy, as the DMA engine would.
    req.work = [dst, src, count] { std::memmove(dst, src, count); };
  } else if (!src_dev) {
    // Pageable host source: read at the call, so the caller may reuse it on return.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + count);
    req.work = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  } else {
    req.work = [dst, src, count] { std::memmove(dst, src, count); };
  }
  Enqueued done = enqueue(std::move(req));
  if (done.status != cudaSuccess || !synchronous || (src_dev && dst_dev)) return done.status;
  return host_wait(done.stream, done.seq, done.vc);
}

}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t size) {
  count_api("cudaMalloc");
  CUDASIM_NO_CALLBACK("cudaMalloc");
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "cudaMalloc: devPtr is null");
  if (const cudaError_t status = check_capture_unsafe("cudaMalloc"); status != cudaSuccess) {
    return status;
  }
  return device_malloc(current_device(), size, ptr);
}

cudaError_t cudaFree(void* ptr) {
  count_api("cudaFree");
  CUDASIM_NO_CALLBACK("cudaFree");
  if (const cudaError_t status = check_capture_unsafe("cudaFree"); status != cudaSuccess) {
    return status;
  }
  return device_free(ptr);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  count_api("cudaMallocHost");
  CUDASIM_NO_CALLBACK("cudaMallocHost");
  if (ptr == nullptr) return fail(cudaErrorInvalidValue, "cudaMallocHost: ptr is null");
  *ptr = nullptr;
  if (const cudaError_t status = check_capture_unsafe("cudaMallocHost"); status != cudaSuccess) {
    return status;
  }
  if (size == 0) return cudaSuccess;
  void* block = nullptr;
  if (posix_memalign(&block, 4096, size) != 0) {
    return fail(cudaErrorMemoryAllocation, "cudaMallocHost of " + std::to_string(size) + " B");
  }
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  r.pinned[reinterpret_cast<uintptr_t>(block)] = size;
  *ptr = block;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  count_api("cudaFreeHost");
  CUDASIM_NO_CALLBACK("cudaFreeHost");
  if (ptr == nullptr) return cudaSuccess;
  if (const cudaError_t status = check_capture_unsafe("cudaFreeHost"); status != cudaSuccess) {
    return status;
  }
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.pinned.count(reinterpret_cast<uintptr_t>(ptr)) == 0) {
      std::ostringstream why;
      why << "cudaFreeHost(" << ptr << "): not a block from cudaMallocHost";
      return fail(cudaErrorInvalidValue, why.str());
    }
  }
  // Like CUDA, it waits for the devices' work first (a queued copy may still read the block).
  for (int d = 0; d < r.device_count; ++d) {
    const cudaError_t status = sync_device(d);
    if (status != cudaSuccess) return status;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  r.pinned.erase(reinterpret_cast<uintptr_t>(ptr));
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return copy("cudaMemcpy", dst, src, count, kind, nullptr, /*synchronous=*/true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy("cudaMemcpyAsync", dst, src, count, kind, stream, /*synchronous=*/false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t count, cudaStream_t stream) {
  const int n = rt().device_count;
  if (dst_device < 0 || dst_device >= n || src_device < 0 || src_device >= n) {
    return fail(cudaErrorInvalidDevice, "cudaMemcpyPeerAsync: device " +
                                            std::to_string(src_device) + " -> " +
                                            std::to_string(dst_device));
  }
  if (count == 0) return cudaSuccess;
  const Place d = classify(dst, count), s = classify(src, count);
  auto wrong = [&](const char* which, const void* p, const Place& place, int want) {
    std::ostringstream out;
    out << "cudaMemcpyPeerAsync " << count << " B: " << which << " " << p << " is ";
    if (place.where == Where::kBad) out << place.why;
    else if (place.where == Where::kHost) out << "host memory";
    else out << "memory of device " << place.device;
    out << ", not of device " << want;
    return fail(cudaErrorInvalidValue, out.str());
  };
  if (d.where != Where::kDevice || d.device != dst_device) return wrong("destination", dst, d, dst_device);
  if (s.where != Where::kDevice || s.device != src_device) return wrong("source", src, s, src_device);
  return copy("cudaMemcpyPeerAsync", dst, src, count, cudaMemcpyDeviceToDevice, stream, false);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  count_api("cudaMemsetAsync");
  CUDASIM_NO_CALLBACK("cudaMemsetAsync");
  if (count == 0) return cudaSuccess;
  const Place p = classify(ptr, count);
  if (p.where != Where::kDevice) {
    std::ostringstream out;
    out << "cudaMemsetAsync " << count << " B: " << ptr << " is "
        << (p.where == Where::kBad ? p.why : "host memory");
    return fail(cudaErrorInvalidValue, out.str());
  }
  Request req;
  req.stream = stream;
  req.site.what = "cudaMemsetAsync " + std::to_string(count) + " B";
  req.rules = PointerRules::kCopy;
  req.accesses.push_back({ptr, count, /*write=*/true});
  req.work = [ptr, value, count] { std::memset(ptr, value, count); };
  return enqueue(std::move(req)).status;
}
