// enqueue_kernel and is_device_memory (sim_internal.h): the executor's way onto a stream.
#include "cudasim/context.h"
#include "cudasim/errors.h"

namespace cudasim {

cudaError_t enqueue_kernel(cudaStream_t stream, const Site& site, std::vector<Access> accesses,
                           std::function<void()> work) {
  detail::count_api("kernel launch");
  CUDASIM_NO_CALLBACK("a kernel launch");
  detail::Request req;
  req.stream = stream;
  req.site = site;
  req.accesses = std::move(accesses);
  req.rules = detail::PointerRules::kKernel;
  req.work = std::move(work);
  return detail::enqueue(std::move(req)).status;
}

}  // namespace cudasim

namespace cudasim {

bool is_device_memory(const void* p) {
  detail::Runtime& r = detail::rt();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.memory.find_live(p) != nullptr;
}

}  // namespace cudasim
