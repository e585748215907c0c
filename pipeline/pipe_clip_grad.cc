// Pipe::clip_grad_norm: the global gradient norm of a model cut into stages.
#include <cmath>

#include "nn/clip_grad.h"
#include "pipeline/pipe.h"
#include "pipeline/processes.h"
#include "pipeline/runtime.h"

namespace pipewright::pipeline {

// Each process holds the gradients of the stages its workers run (in one process: all of
// them). Its share of the norm (Σ|g|^p, or max|g|) is combined over the processes of the
// pipeline, so every process gets the same total and scales its own gradients by it.
double Pipe::clip_grad_norm(double max_norm, double norm_type) {
  nn::Tensors local;
  for (int s = 0; s < num_stages(); ++s) {
    const bool here = options_.processes == nullptr ||
                      options_.processes->runs_worker(runtime_->stage_worker()[s]);
    if (!here) continue;
    const nn::Tensors stage = runtime_->partition(s).parameters();
    local.insert(local.end(), stage.begin(), stage.end());
  }
  double share = nn::grad_norm_share(local, norm_type);
  if (options_.processes != nullptr) {
    share = options_.processes->combine_over_pipeline(share, std::isinf(norm_type));
  }
  const double norm = nn::norm_from_share(share, norm_type);
  nn::clip_grads_with_norm(local, max_norm, norm);
  return norm;
}

}  // namespace pipewright::pipeline
