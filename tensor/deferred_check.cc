#include "tensor/deferred_check.h"

#include <map>
#include <utility>

namespace pipewright {
namespace {

std::vector<DeferredCheck>& thread_checks() {
  thread_local std::vector<DeferredCheck> checks;
  return checks;
}

}  // namespace

void defer_check(DeferredCheck check) { thread_checks().push_back(std::move(check)); }

std::vector<DeferredCheck> take_deferred_checks() {
  std::vector<DeferredCheck> checks;
  checks.swap(thread_checks());
  return checks;
}

void raise_failed(const std::vector<DeferredCheck>& checks) {
  if (checks.empty()) return;
  // Per device, every flag in one tensor (device-to-device copies), then one copy to the host.
  std::map<Device, std::vector<size_t>> by_device;
  for (size_t i = 0; i < checks.size(); ++i) by_device[checks[i].flag.device()].push_back(i);
  std::vector<int64_t> position(checks.size(), -1);
  for (const auto& [device, indices] : by_device) {
    std::vector<Tensor> flags;
    for (size_t i : indices) flags.push_back(checks[i].flag.reshape({1}));
    const std::vector<int64_t> values = cat(flags).to_vector<int64_t>();
    for (size_t k = 0; k < indices.size(); ++k) position[indices[k]] = values[k];
  }
  for (size_t i = 0; i < checks.size(); ++i) {
    if (position[i] >= 0) std::rethrow_exception(checks[i].error(position[i]));
  }
}

void raise_deferred_checks() {
  if (thread_checks().empty()) return;
  raise_failed(take_deferred_checks());
}

}  // namespace pipewright
