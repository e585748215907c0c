// The CUDA runtime C API (errors, devices, streams, host functions) over the simulated devices
// of context.h. Memory functions: runtime_memory.cc; events: runtime_events.cc.
#include <cstdio>
#include <cstring>

#include "cudasim/context.h"
#include "cudasim/errors.h"

using namespace cudasim::detail;  // NOLINT: the C API below is all this file is

namespace {


}  // namespace

// ---- errors and versions -------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  const cudaError_t last = take_last_error();
  if (last != cudaSuccess) return last;
  std::string detail;
  const int device = current_device();
  if (device < 0 || device >= rt().device_count) return cudaSuccess;
  const cudaError_t sticky = rt().devices[static_cast<size_t>(device)]->sticky.get(&detail);
  if (sticky != cudaSuccess) remember_detail(sticky, detail);
  return sticky;
}

cudaError_t cudaPeekAtLastError(void) {
  const cudaError_t last = peek_last_error();
  if (last != cudaSuccess) return last;
  const int device = current_device();
  if (device < 0 || device >= rt().device_count) return cudaSuccess;
  return rt().devices[static_cast<size_t>(device)]->sticky.get();
}

const char* cudaGetErrorString(cudaError_t error) { return error_string(error); }
const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue, "version is null");
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue, "version is null");
  *version = CUDART_VERSION;
  return cudaSuccess;
}

// ---- devices -------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue, "count is null");
  *count = rt().device_count;
  if (*count == 0) return fail(cudaErrorNoDevice, "PIPEWRIGHT_CUDASIM_DEVICES=0");
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "device is null");
  if (rt().device_count == 0) return fail(cudaErrorNoDevice, "PIPEWRIGHT_CUDASIM_DEVICES=0");
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  CUDASIM_NO_CALLBACK("cudaSetDevice");
  Runtime& r = rt();
  if (r.device_count == 0) return fail(cudaErrorNoDevice, "PIPEWRIGHT_CUDASIM_DEVICES=0");
  if (device < 0 || device >= r.device_count) {
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): " +
                                            std::to_string(r.device_count) + " devices");
  }
  current_device() = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return fail(cudaErrorInvalidValue, "prop is null");
  Runtime& r = rt();
  if (r.device_count == 0) return fail(cudaErrorNoDevice, "PIPEWRIGHT_CUDASIM_DEVICES=0");
  if (device < 0 || device >= r.device_count) {
    return fail(cudaErrorInvalidDevice, "device " + std::to_string(device));
  }
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "cudasim device %d", device);
  prop->totalGlobalMem = r.memory_limit;
  prop->sharedMemPerBlock = cudasim::kMaxDynamicSharedBytes;
  prop->sharedMemPerBlockOptin = cudasim::kMaxDynamicSharedBytes;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = static_cast<int>(cudasim::kMaxThreadsPerBlock);
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = static_cast<int>(cudasim::kMaxBlockDimZ);
  prop->maxGridSize[0] = static_cast<int>(cudasim::kMaxGridDimX);
  prop->maxGridSize[1] = static_cast<int>(cudasim::kMaxGridDimYZ);
  prop->maxGridSize[2] = static_cast<int>(cudasim::kMaxGridDimYZ);
  prop->totalConstMem = 65536;
  prop->major = 9;
  prop->minor = 0;
  prop->textureAlignment = 512;
  prop->multiProcessorCount = 132;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 5120;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->canMapHostMemory = 1;
  prop->pciBusID = device;
  prop->computePreemptionSupported = 1;
  prop->cooperativeLaunch = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue, "value is null");
  cudaDeviceProp prop;
  const cudaError_t status = cudaGetDeviceProperties(&prop, device);
  if (status != cudaSuccess) return status;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = prop.multiProcessorCount; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = prop.maxThreadsPerBlock; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = prop.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrMaxGridDimX: *value = prop.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = prop.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = prop.maxGridSize[2]; break;
    case cudaDevAttrWarpSize: *value = prop.warpSize; break;
    case cudaDevAttrComputeCapabilityMajor: *value = prop.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = prop.minor; break;
    default:
      return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " +
                                             std::to_string(static_cast<int>(attr)) +
                                             " is not simulated");
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  count_api("cudaDeviceSynchronize");
  CUDASIM_NO_CALLBACK("cudaDeviceSynchronize");
  {
    std::lock_guard<std::mutex> lock(rt().mu);
    const cudaError_t status = check_device_locked(current_device());
    if (status != cudaSuccess) return status;
    if (const cudaError_t c = check_capture_unsafe_locked("cudaDeviceSynchronize");
        c != cudaSuccess) {
      return c;
    }
    for (const auto& capture : rt().captures) {  // relaxed mode too: it would wait for them
      if (capture->origin->device == current_device()) {
        if (const cudaError_t c = check_not_capturing_locked(capture->origin,
                                                             "cudaDeviceSynchronize");
            c != cudaSuccess) {
          return c;
        }
      }
    }
  }
  return sync_device(current_device());
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return fail(cudaErrorInvalidValue, "canAccessPeer is null");
  const int n = rt().device_count;
  if (device < 0 || device >= n || peer < 0 || peer >= n) {
    return fail(cudaErrorInvalidDevice, "cudaDeviceCanAccessPeer(" + std::to_string(device) +
                                            ", " + std::to_string(peer) + ")");
  }
  *can = device != peer ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  CUDASIM_NO_CALLBACK("cudaDeviceEnablePeerAccess");
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  const int device = current_device();
  cudaError_t status = check_device_locked(device);
  if (status != cudaSuccess) return status;
  if (flags != 0) return fail(cudaErrorInvalidValue, "flags must be 0");
  if (peer < 0 || peer >= r.device_count || peer == device) {
    return fail(cudaErrorInvalidDevice, "peer " + std::to_string(peer) + " from device " +
                                            std::to_string(device));
  }
  std::vector<bool>& enabled = r.devices[static_cast<size_t>(device)]->peer_enabled;
  if (enabled[static_cast<size_t>(peer)]) {
    return fail(cudaErrorPeerAccessAlreadyEnabled,
                "device " + std::to_string(device) + " -> " + std::to_string(peer));
  }
  enabled[static_cast<size_t>(peer)] = true;
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  CUDASIM_NO_CALLBACK("cudaDeviceDisablePeerAccess");
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  const int device = current_device();
  if (const cudaError_t status = check_device_locked(device); status != cudaSuccess) {
    return status;
  }
  if (peer < 0 || peer >= r.device_count || peer == device) {
    return fail(cudaErrorInvalidDevice, "peer " + std::to_string(peer) + " from device " +
                                            std::to_string(device));
  }
  std::vector<bool>& enabled = r.devices[static_cast<size_t>(device)]->peer_enabled;
  if (!enabled[static_cast<size_t>(peer)]) {
    return fail(cudaErrorPeerAccessNotEnabled,
                "device " + std::to_string(device) + " -> " + std::to_string(peer));
  }
  enabled[static_cast<size_t>(peer)] = false;
  return cudaSuccess;
}

// ---- streams -------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  count_api("cudaStreamCreateWithFlags");
  CUDASIM_NO_CALLBACK("cudaStreamCreateWithFlags");
  if (stream == nullptr) return fail(cudaErrorInvalidValue, "pStream is null");
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking) {
    return fail(cudaErrorInvalidValue, "flags " + std::to_string(flags));
  }
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  const int device = current_device();
  const cudaError_t status = check_device_locked(device);
  if (status != cudaSuccess) return status;
  *stream = r.create_stream_locked(device, /*blocking=*/flags == cudaStreamDefault);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUDASIM_NO_CALLBACK("cudaStreamDestroy");
  Runtime& r = rt();
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    s = r.forget_stream_locked(stream);
    if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  }
  s->stop_and_join();  // its queued work still runs (or is skipped when sticky)
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  count_api("cudaStreamSynchronize");
  CUDASIM_NO_CALLBACK("cudaStreamSynchronize");
  std::shared_ptr<Stream> s;
  {
    std::lock_guard<std::mutex> lock(rt().mu);
    s = resolve_stream_locked(stream);
    if (!s) return peek_last_error();
    if (const cudaError_t c = check_not_capturing_locked(s, "cudaStreamSynchronize");
        c != cudaSuccess) {
      return c;
    }
    if (const cudaError_t c = check_capture_unsafe_locked("cudaStreamSynchronize");
        c != cudaSuccess) {
      return c;
    }
  }
  return sync_stream(s);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUDASIM_NO_CALLBACK("cudaStreamQuery");
  std::shared_ptr<Stream> s;
  uint64_t seq;
  VectorClock vc;
  {
    std::lock_guard<std::mutex> lock(rt().mu);
    s = resolve_stream_locked(stream);
    if (!s) return peek_last_error();
    if (const cudaError_t c = check_not_capturing_locked(s, "cudaStreamQuery"); c != cudaSuccess) {
      return c;
    }
    if (const cudaError_t c = check_capture_unsafe_locked("cudaStreamQuery"); c != cudaSuccess) {
      return c;
    }
    seq = s->enqueued;
    vc = s->vc;
  }
  if (!s->done(seq)) return cudaErrorNotReady;  // a status: not set as the last error
  return host_wait(s, seq, vc);
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "device is null");
  std::lock_guard<std::mutex> lock(rt().mu);
  std::shared_ptr<Stream> s = resolve_stream_locked(stream);
  if (!s) return peek_last_error();
  *device = s->device;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  count_api("cudaStreamWaitEvent");
  CUDASIM_NO_CALLBACK("cudaStreamWaitEvent");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent flags must be 0");
  Request req;
  {
    std::lock_guard<std::mutex> lock(rt().mu);
    std::shared_ptr<Event> e = find_event_locked(event);
    if (!e) return cudaErrorInvalidResourceHandle;
    if (!resolve_stream_locked(stream)) return peek_last_error();
    if (!e->last) return cudaSuccess;  // never recorded: nothing to wait for
    req.wait = e->last;
  }
  req.stream = stream;
  req.site.what = "cudaStreamWaitEvent";
  return enqueue(std::move(req)).status;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  CUDASIM_NO_CALLBACK("cudaLaunchHostFunc");
  if (fn == nullptr) return fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: fn is null");
  Request req;
  req.stream = stream;
  req.site.what = "cudaLaunchHostFunc";
  req.work = [fn, user_data] {
    set_in_host_callback(true);
    fn(user_data);
    set_in_host_callback(false);
  };
  return enqueue(std::move(req)).status;
}

