// Fuzzes loading a file into a model: nn::load_state_dict and nn::load_checkpoint
// (nn/serialize.h) with a small model (Linear, BatchNorm1d, ReLU, Linear) and an SGD with
// momentum and an AdamW, so shape/dtype mismatches, missing and extra keys and malformed
// optimizer state all come up. Every input must either throw SafetensorsError or
// std::invalid_argument with the model and optimizer untouched (all or nothing), or load;
// a loaded model and optimizer must then take a training step without crashing.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "fuzz/fuzz_util.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/sequential.h"
#include "nn/serialize.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace {

namespace nn = pipewright::nn;
using pipewright::Shape;
using pipewright::Tensor;
using pipewright::fuzz::check;

nn::Sequential make_model() {
  pipewright::default_generator().set_state(1, 0);
  return nn::Sequential{nn::Linear(3, 4), nn::BatchNorm1d(4), nn::ReLU(), nn::Linear(4, 2)};
}

std::vector<std::string> snapshot(const nn::NamedTensors& state) {
  std::vector<std::string> out;
  for (const auto& [name, t] : state) {
    const Tensor c = t.contiguous();
    out.emplace_back(name + "=" + std::string(static_cast<const char*>(c.raw_data()), c.nbytes()));
  }
  return out;
}

void step(nn::Sequential& model, nn::Optimizer& opt) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, -1, 0, 4}, Shape{2, 3});
  const Tensor y = Tensor::from_vector(std::vector<float>{0.5f, -1, 2, 0}, Shape{2, 2});
  opt.zero_grad();
  nn::mse_loss(model.forward(x), y).backward();
  opt.step();
}

// One load attempt: on failure nothing may have changed.
template <typename Load>
void attempt(nn::Sequential& model, nn::Optimizer* opt, Load load) {
  const std::vector<std::string> model_before = snapshot(model.state_dict());
  const std::vector<std::string> opt_before =
      opt != nullptr ? snapshot(opt->state_dict()) : std::vector<std::string>{};
  try {
    load();
  } catch (const nn::SafetensorsError&) {
    check(snapshot(model.state_dict()) == model_before, "a failed load changed the model");
    return;
  } catch (const std::invalid_argument&) {
    check(snapshot(model.state_dict()) == model_before, "a failed load changed the model");
    if (opt != nullptr) {
      check(snapshot(opt->state_dict()) == opt_before, "a failed load changed the optimizer");
    }
    return;
  }
  if (opt != nullptr) step(model, *opt);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = pipewright::fuzz::scratch_path("state.safetensors");
  pipewright::fuzz::write_file(path, data, size);

  nn::Sequential model = make_model();
  attempt(model, nullptr, [&] { nn::load_state_dict(path, model); });

  nn::Sequential with_sgd = make_model();
  nn::SGD sgd(with_sgd.parameters(), {.lr = 0.1, .momentum = 0.9});
  step(with_sgd, sgd);  // momentum buffers exist
  attempt(with_sgd, &sgd, [&] { nn::load_checkpoint(path, with_sgd, sgd); });

  nn::Sequential with_adam = make_model();
  nn::AdamW adam(with_adam.parameters(), {.lr = 0.01});
  attempt(with_adam, &adam, [&] { nn::load_checkpoint(path, with_adam, adam); });
  return 0;
}
