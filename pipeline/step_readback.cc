#include "pipeline/step_readback.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tensor/ops.h"
#include "tensor/stream.h"

namespace pipewright::pipeline {

// Note [One read per step]
// The host learns a step's losses, and whether a kernel met a bad index (Note [Deferred
// checks], tensor/deferred_check.h), once, after the workers are done and the caller's
// streams waited for theirs (the exit fence): per device, the values are cast to float64 and
// gathered into one tensor there (kernels and device-to-device copies on the caller's stream),
// which comes to the host in one copy, the step's one wait (one per device that holds any).
// So no worker waits for its own results in the middle of a step, and a GPU stage keeps its
// queue full: each micro-batch's loss.item() and every cross-entropy's index check used to
// stall the last stage. The price: a NaN or infinite loss (Note [Non-finite loss]) or a bad
// index is found after the step's backwards ran, so .grad holds what they spread (the
// exception says so; zero .grad before the next step).
GatheredValues gather_step_values(Step& step) {
  struct Value {
    Tensor tensor;
    GatheredValues::Value what;
  };
  // Per device, then per dtype (losses float, flags int64): one gather and one cast each.
  std::map<Device, std::map<DType, std::vector<Value>>> by_device;
  for (int j = 0; step.loss != nullptr && j < step.num_microbatches; ++j) {
    const Tensor& loss = step.loss->value(j);
    if (loss.defined()) by_device[loss.device()][loss.dtype()].push_back({loss, {j, nullptr}});
  }
  for (const auto& checks : step.deferred_checks) {
    for (const auto& check : checks) {
      const Tensor& flag = check.first.flag;
      by_device[flag.device()][flag.dtype()].push_back({flag, {-1, &check}});
    }
  }
  GatheredValues gathered;
  for (const auto& [device, by_dtype] : by_device) {
    const Stream stream = Stream::current(device);
    nn::Tensors groups;
    std::vector<GatheredValues::Value> order;
    for (const auto& [dtype, values] : by_dtype) {
      nn::Tensors parts;
      for (const Value& v : values) {
        record_stream(v.tensor, stream);  // a worker's block, read on the caller's stream
        parts.push_back(v.tensor.reshape({1}));
        order.push_back(v.what);
      }
      groups.push_back(cat(parts).to(DType::kFloat64));
      // With defer_read, the gate: Σ loss·0 (NaN for a non-finite loss) + relu(max flag + 1).
      if (step.defer_read) {
        const Tensor& group = groups.back();
        const bool losses = values.front().what.loss >= 0;  // a dtype holds losses or flags
        Tensor part = losses ? ops::sum(ops::mul(group, 0.0))
                             : ops::relu(ops::add(ops::max(group, 0), 1.0));
        part = part.to(by_device.begin()->first);
        gathered.gate = gathered.gate.defined() ? ops::add(gathered.gate, part) : part;
      }
    }
    gathered.tensors.push_back(cat(groups));
    gathered.values.push_back(std::move(order));
  }
  for (int j = 0; step.loss != nullptr && j < step.num_microbatches; ++j) {
    step.loss->value(j) = Tensor();
  }
  return gathered;
}

void read_step_values(Step& step) { read_step_values(step, gather_step_values(step)); }

void add_overflow_finding(GatheredValues& gathered, const Tensor& finding) {
  const GatheredValues::Value what{.overflow = true};
  if (gathered.tensors.empty()) {
    gathered.tensors.push_back(finding.reshape({1}));
    gathered.values.push_back({what});
    return;
  }
  Tensor& first = gathered.tensors.front();
  first = cat({first, finding.to(first.device()).reshape({1})});
  gathered.values.front().push_back(what);
}

void gather_on(GatheredValues& gathered, Device device) {
  if (gathered.tensors.empty() ||
      (gathered.tensors.size() == 1 && gathered.tensors.front().device() == device)) {
    return;
  }
  nn::Tensors parts;
  std::vector<GatheredValues::Value> order;
  for (size_t d = 0; d < gathered.tensors.size(); ++d) {
    parts.push_back(gathered.tensors[d].to(device));
    order.insert(order.end(), gathered.values[d].begin(), gathered.values[d].end());
  }
  gathered.tensors = {cat(parts)};
  gathered.values = {std::move(order)};
}

void read_step_values(Step& step, const GatheredValues& gathered) {
  const std::pair<DeferredCheck, ActionSite>* failed_check = nullptr;
  int64_t failed_position = -1;
  for (size_t d = 0; d < gathered.tensors.size(); ++d) {
    const std::vector<double> host = gathered.tensors[d].to_vector<double>();  // the one copy
    const std::vector<GatheredValues::Value>& order = gathered.values[d];
    for (size_t k = 0; k < order.size(); ++k) {
      if (order[k].loss >= 0) {
        step.losses[static_cast<size_t>(order[k].loss)] = host[k];
      } else if (order[k].overflow) {
        step.found_inf = !(host[k] == 0.0);
      } else if (host[k] >= 0 && failed_check == nullptr) {
        failed_check = order[k].check;
        failed_position = static_cast<int64_t>(host[k]);
      }
    }
  }
  if (failed_check != nullptr) {  // a bad index, as the kernel's own exception
    const ActionSite& w = failed_check->second;
    step.fail_at(failed_check->first.error(failed_position), w.worker, w.index, w.action);
    return;
  }
  // Note [Non-finite loss]: a NaN or infinite loss fails the training step (eval_step, which
  // runs no backward, reports it as it is).
  if (step.mode == CellMode::kNoGrad || step.loss == nullptr) return;
  for (int j = 0; j < step.num_microbatches; ++j) {
    const double loss = step.losses[static_cast<size_t>(j)];
    if (std::isfinite(loss)) continue;
    const ActionSite& w = step.loss->site(j);
    step.fail_at(std::make_exception_ptr(std::domain_error(
                     "train_step: the loss of micro-batch " + std::to_string(j) + " is " +
                     std::to_string(loss) + " (not finite); the step's backwards ran, so .grad "
                     "holds non-finite values: zero it before the next step")),
                 w.worker, w.index, w.action);
    return;
  }
}

}  // namespace pipewright::pipeline
