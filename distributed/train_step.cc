// distributed::train_step (mpi_processes.h): a global batch shared out over the replicas,
// each replica's rows through its Pipe, the loss summed back.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/mpi_processes.h"
#include "pipeline/microbatch.h"

namespace pipewright::distributed {

std::pair<int64_t, int64_t> replica_rows(int64_t n, int replica, int replicas) {
  const int64_t base = n / replicas, extra = n % replicas;
  const int64_t begin = replica * base + std::min<int64_t>(replica, extra);
  return {begin, begin + base + (replica < extra ? 1 : 0)};
}

namespace {

// This replica's share of every split tensor of `tensors` (replicated ones whole).
nn::Tensors replica_share(const nn::Tensors& tensors, const std::vector<pipeline::ChunkSpec>& specs,
                          int64_t n, int64_t begin, int64_t end, const std::string& what) {
  std::vector<int64_t> sizes;
  for (int64_t size : {begin, end - begin, n - end}) {
    if (size > 0) sizes.push_back(size);
  }
  const size_t mine = begin > 0 ? 1 : 0;
  return pipeline::split_to(tensors, specs, sizes, what).at(mine);
}

}  // namespace

pipeline::StepResult train_step(pipeline::Pipe& pipe, const Tensor& input, const Tensor& target,
                                const pipeline::LossFn& loss_fn,
                                const pipeline::StepOptions& options) {
  if (!input.defined() || !target.defined()) {
    throw std::invalid_argument("distributed::train_step: input and target must be defined");
  }
  if (input.dim() == 0) {
    throw std::invalid_argument("distributed::train_step: the input is a scalar (shape [])");
  }
  return train_step(pipe, nn::Tensors{input}, nn::Tensors{target},
                    pipeline::as_tuple_loss(loss_fn), options);
}

pipeline::StepResult train_step(pipeline::Pipe& pipe, const nn::Tensors& inputs,
                                const nn::Tensors& targets, const pipeline::TupleLossFn& loss_fn,
                                const pipeline::StepOptions& options) {
  auto* mpi = dynamic_cast<MpiProcesses*>(pipe.options().processes.get());
  if (mpi == nullptr) {
    throw std::invalid_argument(
        "distributed::train_step: the Pipe was built without an MpiProcesses "
        "(PipeOptions::processes); call Pipe::train_step for a Pipe in one process");
  }
  MpiProcesses& processes = *mpi;
  // N: one micro-batch of everything tells the batch size and checks the specs.
  const std::vector<pipeline::ChunkSpec> input_specs =
      pipeline::chunk_specs(options.input_chunks, inputs.size(), "input");
  int64_t n = -1;
  for (size_t i = 0; i < inputs.size() && n < 0; ++i) {
    if (input_specs[i].replicated || !inputs[i].defined() || inputs[i].dim() == 0) continue;
    const int64_t d = input_specs[i].dim < 0 ? input_specs[i].dim + inputs[i].dim()
                                             : input_specs[i].dim;
    if (d >= 0 && d < inputs[i].dim()) n = inputs[i].size(d);
  }
  if (n < 0 || processes.replicas() == 1) {
    // Nothing to share out (with n < 0, Pipe::train_step throws, naming what is wrong).
    processes.set_gradient_scale(1.0);
    return pipe.train_step(inputs, targets, loss_fn, options);
  }
  if (n < processes.replicas()) {
    throw std::invalid_argument("distributed::train_step: a batch of " + std::to_string(n) +
                                " rows cannot be shared by " +
                                std::to_string(processes.replicas()) + " replicas");
  }
  auto [begin, end] = replica_rows(n, processes.replica(), processes.replicas());
  const bool sum = options.reduction == pipeline::LossReduction::kSum;
  const double weight = sum ? 1.0 : static_cast<double>(end - begin) / static_cast<double>(n);
  processes.set_gradient_scale(weight);
  // Random layers key their draws by each row's index in the global batch (Note [Keyed
  // randomness], nn/random_key.h), so any data-parallel degree draws the same masks.
  pipeline::StepOptions share_options = options;
  share_options.first_sample = options.first_sample + begin;
  pipeline::StepResult result = pipe.train_step(
      replica_share(inputs, options.input_chunks, n, begin, end, "input"),
      replica_share(targets, options.target_chunks, n, begin, end, "target"), loss_fn,
      share_options);
  result.loss = processes.sum_over_replicas(result.loss * weight);
  return result;
}

}  // namespace pipewright::distributed
