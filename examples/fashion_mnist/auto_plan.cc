#include "examples/fashion_mnist/auto_plan.h"

#include <algorithm>

#include "examples/common/run_setup.h"

namespace pipewright::examples {

pipeline::Plan plan_training(const TrainConfig& config, nn::Sequential& model,
                             const data::Dataset& train_set, const pipeline::LossFn& loss,
                             const std::vector<Device>& devices) {
  const int64_t rows = std::min<int64_t>(config.batch_size, train_set.size());
  const data::Batch first = train_set.slice(0, rows);
  pipeline::PlanOptions options = plan_options(config);
  options.optimizer_state_factor = config.optimizer == "adam" ? 2.0 : 1.0;
  options.deferred_batch_norm = true;
  return pipeline::plan(model, {first.inputs, first.targets, loss}, devices, options);
}

}  // namespace pipewright::examples
