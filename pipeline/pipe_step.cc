// Pipe::step: the optimizer's step, each stage's part on that stage's worker.
#include <unordered_map>
#include <vector>

#include "nn/optimizer.h"
#include "nn/tensors.h"
#include "pipeline/pipe.h"
#include "pipeline/processes.h"
#include "pipeline/runtime.h"

namespace pipewright::pipeline {

void Pipe::step(nn::Optimizer& optimizer) {
  optimizer.check_grads();  // all checked before any stage changes anything
  std::unordered_map<const TensorImpl*, int> worker_of;  // a parameter's stage's worker
  for (int s = 0; s < num_stages(); ++s) {
    for (const Tensor& p : runtime_->partition(s).parameters()) {
      worker_of[p.impl()] = runtime_->stage_worker()[static_cast<size_t>(s)];
    }
  }
  std::vector<std::vector<size_t>> parts(static_cast<size_t>(num_workers()));
  std::vector<size_t> callers;
  const nn::Tensors& params = optimizer.params();
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = worker_of.find(params[i].impl());
    (it == worker_of.end() ? callers : parts[static_cast<size_t>(it->second)]).push_back(i);
  }
  runtime_->run_on_workers([&](int w) { optimizer.step(parts[static_cast<size_t>(w)]); });
  if (!callers.empty()) optimizer.step(callers);
}

}  // namespace pipewright::pipeline
