// End-to-end on GPUs: the Fashion-MNIST example's model trained through a two-stage pipeline on
// GPUs (cuda:0,cuda:1, or both stages on cuda:0 where there is one GPU) against the same
// pipeline on cpu:0,cpu:1. Under --config=cudasim the GPUs are simulated and every unordered
// stream access is refused as a race (the run throws); on a machine with a GPU the test binary
// runs from the bundle (tools/gpu/check.sh, docs/cuda.md).
//
// Both sides start from the same weights and see the same batches and dropout masks (Philox is
// bit for bit on CPU and CUDA), so they differ only by the float32 summation orders of GEMMs,
// reductions and BatchNorm. How much that is depends on the model (Note [Two correct GEMMs],
// tests/examples/cross_run.h):
//
// 1. One step from one shared state, compared tightly, on the smooth model (tanh): before each
//    of the first steps the GPU pipe gets the CPU pipe's weights, BatchNorm buffers and
//    optimizer state, both run the step, and everything it produced is compared: each
//    micro-batch's loss, every gradient, the optimizer's state, the updated weights and the
//    BatchNorm buffers. A wrong kernel, a stale or reordered activation, a lost or doubled
//    gradient, a wrong learning rate show here by orders of magnitude.
// 2. Whole runs (32 steps), left to drift: the smooth model within smooth_run_bounds (rounding
//    level), the example's own ReLU model within relu_run_bounds, the distance two correct CPU
//    GEMMs reach over many seeds (the CPU test cross_gemm_test holds OpenBLAS and Eigen to the
//    same bounds).
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include <catch2/catch.hpp>

#include "data/dataloader.h"
#include "data/fashion_mnist.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/balance.h"
#include "pipeline/pipe.h"
#include "tensor/ops.h"
#include "tests/cuda/gpu_test.h"
#include "tests/examples/cross_run.h"

namespace {

using pipewright::Device;
using pipewright::Tensor;
using pipewright::examples::TrainResult;
using pipewright::pipeline::Checkpoint;
using namespace pipewright;

// ---- 1. one step from one shared state ----

// Gradient-like tensors (gradients, momentum, Adam's first moment, BatchNorm's running mean)
// agree within kRtol·|cpu| + kAtolOfMax·max|cpu| of the tensor: a GEMM's float32 error is
// ~1e-6 of |A|·|B| (measured ≤ 3.8e-7 per element against float64 here), so an element that
// is a sum of cancelling products may differ by that much of the tensor's largest.
constexpr double kRtol = 1e-3;
constexpr double kAtolOfMax = 1e-4;
// Steps compared, each from the CPU's state: the first (no optimizer history) and three more.
constexpr int kSharedSteps = 4;

std::unique_ptr<nn::Optimizer> make_optimizer(const std::string& name, const nn::Tensors& params) {
  if (name == "sgd") return std::make_unique<nn::SGD>(params, nn::SGDOptions{.lr = 0.05, .momentum = 0.9});
  return std::make_unique<nn::Adam>(params, nn::AdamOptions{.lr = 1e-3});
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

std::vector<double> values(const Tensor& t) {
  return t.to(Device::cpu(0)).to(DType::kFloat64).contiguous().to_vector<double>();
}

// CHECKs gpu against cpu within rtol·|cpu| + atol_of_max·max|cpu| elementwise; returns the
// worst element's |gpu - cpu| as a fraction of its bound (<= 1: within).
double check_scaled(const std::string& what, const Tensor& gpu, const Tensor& cpu, double rtol,
                    double atol_of_max) {
  REQUIRE(gpu.defined() == cpu.defined());
  if (!cpu.defined()) return 0;
  REQUIRE(gpu.device().is_cuda());
  REQUIRE(gpu.shape() == cpu.shape());
  const std::vector<double> g = values(gpu), c = values(cpu);
  const double atol = atol_of_max * max_abs(c);
  double worst = 0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double ratio = std::abs(g[i] - c[i]) / (atol + rtol * std::abs(c[i]));
    if (!(ratio <= 1)) ++bad;  // NaN counts as out
    if (!(ratio <= worst)) worst = std::isnan(ratio) ? INFINITY : ratio, worst_i = i;
  }
  INFO(what << " " << cpu.shape().str() << ": worst element " << worst_i << " at " << worst
            << " of its bound (gpu " << g[worst_i] << ", cpu " << c[worst_i] << "), " << bad
            << " elements out");
  CHECK(bad == 0);
  return worst;
}

// The updated weights, as the update u = w_new - w_old each side applied from the shared w_old.
// An update is as close as what it is computed from allows:
// - SGD: u = -lr·b with b the new momentum buffer, so within lr times b's tolerance above;
// - Adam divides each gradient by its own root mean square, so an update is as sensitive to
//   the gradient as the gradient's size allows: a gradient g known to within δ (its tolerance
//   above) moves u = -lr·m̂/(√v̂ + ε) by at most about lr·2δ/|g| (at the first step
//   u = -lr·sign(g): equal unless |g| < δ), never by more than 2·lr.
// `step_tolerance` gives that per element; on top, 1e-3 of the update (its own rounding in the
// kernel) and 1e-6 of the weight (the subtraction's).
double check_update(const std::string& what, const Tensor& w_old, const Tensor& w_gpu,
                    const Tensor& w_cpu, const std::vector<double>& step_tolerance) {
  const std::vector<double> old = values(w_old), gpu = values(w_gpu), cpu = values(w_cpu);
  REQUIRE(step_tolerance.size() == cpu.size());
  size_t bad = 0, worst_i = 0;
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double update = cpu[i] - old[i];
    const double allowed = step_tolerance[i] + 1e-3 * std::abs(update) + 1e-6 * std::abs(old[i]);
    const double ratio = std::abs((gpu[i] - old[i]) - update) / allowed;
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst)) worst = std::isnan(ratio) ? INFINITY : ratio, worst_i = i;
  }
  INFO(what << ": worst element " << worst_i << " at " << worst << " of its bound (gpu "
            << gpu[worst_i] << ", cpu " << cpu[worst_i] << ", was " << old[worst_i] << "), "
            << bad << " elements out");
  CHECK(bad == 0);
  return worst;
}

// lr times the tolerance of `b` (check_scaled's) per element: SGD's step tolerance.
std::vector<double> sgd_step_tolerance(const Tensor& buffer, double lr) {
  const std::vector<double> b = values(buffer);
  const double atol = kAtolOfMax * max_abs(b);
  std::vector<double> t(b.size());
  for (size_t i = 0; i < b.size(); ++i) t[i] = lr * (atol + kRtol * std::abs(b[i]));
  return t;
}

// lr·min(2, 2δ/|g|) per element, δ the gradient's tolerance: Adam's step tolerance. Most
// elements must come out held to 1 % of a step or less, or the check would say little.
std::vector<double> adam_step_tolerance(const Tensor& grad, double lr) {
  const std::vector<double> g = values(grad);
  const double atol = kAtolOfMax * max_abs(g);
  std::vector<double> t(g.size());
  size_t tight = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double delta = atol + kRtol * std::abs(g[i]);
    const double sensitivity = std::min(2.0, 2.0 * delta / std::max(std::abs(g[i]), 1e-30));
    if (sensitivity <= 0.01) ++tight;
    t[i] = lr * sensitivity;
  }
  INFO(tight << " of " << g.size() << " elements held to 1 % of an Adam step or less");
  CHECK(tight * 2 > g.size());
  return t;
}

// The optimizer state entry "state.<param>.<name>" (nn/optimizer.h).
Tensor optimizer_state(const nn::NamedTensors& state, size_t param, const std::string& name) {
  const std::string key = "state." + std::to_string(param) + "." + name;
  for (const auto& [k, t] : state) {
    if (k == key) return t;
  }
  FAIL("no optimizer state " << key);
  return {};
}

struct Side {
  std::unique_ptr<pipeline::Pipe> pipe;
  std::unique_ptr<nn::Optimizer> optimizer;
};

Side make_side(const std::vector<Device>& devices, const std::string& schedule,
               Checkpoint checkpoint, const std::string& optimizer) {
  nn::Sequential model = testing::smooth_model({512, 512}, 0.2, 3);
  const std::vector<int> balance = pipeline::balance_by_parameters(2, model);
  Side side;
  side.pipe = std::make_unique<pipeline::Pipe>(
      std::move(model), pipeline::PipeOptions{.balance = balance,
                                              .devices = devices,
                                              .chunks = 4,
                                              .schedule = {.name = schedule,
                                                           .recompute = checkpoint},
                                              .deferred_batch_norm = true,
                                              .seed = 3});
  side.optimizer = make_optimizer(optimizer, side.pipe->parameters());
  return side;
}

void check_shared_state_steps(const std::string& schedule, Checkpoint checkpoint,
                              const std::string& optimizer) {
  const std::vector<Device> gpus = testing::two_stage_gpus();
  if (gpus.empty()) return;
  Side cpu = make_side({Device::cpu(0), Device::cpu(1)}, schedule, checkpoint, optimizer);
  Side gpu = make_side(gpus, schedule, checkpoint, optimizer);
  data::FashionMnistOptions images;
  images.limit = 64 * kSharedSteps;
  const data::Dataset train = data::load_fashion_mnist(data::kDefaultFashionMnistDir,
                                                       data::Split::kTrain, images);
  data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 3});
  const pipeline::LossFn loss = [](const Tensor& logits, const Tensor& target) {
    return nn::cross_entropy(logits, target);
  };
  int step = 0;
  for (const data::Batch& batch : loader) {
    INFO(optimizer << " " << schedule << " checkpoint " << pipeline::to_string(checkpoint)
                   << " on " << gpus[0].str() << "," << gpus[1].str() << ", step " << step
                   << " from the CPU's state");
    // The shared state: the GPU side takes the CPU side's weights, buffers, optimizer state.
    gpu.pipe->module().load_state_dict(cpu.pipe->module().state_dict());
    if (step > 0) gpu.optimizer->load_state_dict(cpu.optimizer->state_dict());
    const nn::NamedTensors before = cpu.pipe->module().state_dict();
    nn::NamedTensors before_copy;
    for (const auto& [name, t] : before) before_copy.emplace_back(name, t.clone());

    cpu.optimizer->zero_grad();
    gpu.optimizer->zero_grad();
    const pipeline::StepResult c = cpu.pipe->train_step(batch.inputs, batch.targets, loss);
    const pipeline::StepResult g =
        gpu.pipe->train_step(batch.inputs.to(gpus[0]), batch.targets.to(gpus[0]), loss);
    REQUIRE(g.microbatch_losses.size() == c.microbatch_losses.size());
    for (size_t j = 0; j < c.microbatch_losses.size(); ++j) {
      INFO("micro-batch " << j << " loss: gpu " << g.microbatch_losses[j] << ", cpu "
                          << c.microbatch_losses[j]);
      CHECK(std::abs(g.microbatch_losses[j] - c.microbatch_losses[j]) <=
            1e-5 * std::abs(c.microbatch_losses[j]));
    }
    const nn::NamedTensors cpu_params = cpu.pipe->module().named_parameters();
    const nn::NamedTensors gpu_params = gpu.pipe->module().named_parameters();
    REQUIRE(cpu_params.size() == gpu_params.size());
    double worst_grad = 0, worst_optimizer = 0, worst_state = 0;
    std::vector<Tensor> cpu_grads;
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      cpu_grads.push_back(cpu_params[i].second.grad().clone());
      worst_grad = std::max(worst_grad, check_scaled("gradient of " + cpu_params[i].first,
                                                     gpu_params[i].second.grad(),
                                                     cpu_params[i].second.grad(), kRtol, kAtolOfMax));
    }

    cpu.optimizer->step();
    gpu.optimizer->step();
    const nn::NamedTensors cpu_opt = cpu.optimizer->state_dict();
    const nn::NamedTensors gpu_opt = gpu.optimizer->state_dict();
    REQUIRE(cpu_opt.size() == gpu_opt.size());
    for (size_t i = 0; i < cpu_opt.size(); ++i) {
      REQUIRE(gpu_opt[i].first == cpu_opt[i].first);
      const Tensor& t = cpu_opt[i].second;
      if (t.device().is_cpu() && gpu_opt[i].second.device().is_cpu()) {  // step, hyperparameters
        CHECK(ops::equal(gpu_opt[i].second, t));
      } else {
        worst_optimizer = std::max(worst_optimizer, check_scaled("optimizer " + cpu_opt[i].first,
                                                                 gpu_opt[i].second, t, kRtol,
                                                                 kAtolOfMax));
      }
    }
    const nn::NamedTensors cpu_state = cpu.pipe->module().state_dict();
    const nn::NamedTensors gpu_state = gpu.pipe->module().state_dict();
    for (size_t i = 0, p = 0; i < cpu_state.size(); ++i) {
      const std::string& name = cpu_state[i].first;
      REQUIRE(gpu_state[i].first == name);
      const bool is_param = p < cpu_params.size() && cpu_params[p].first == name;
      if (cpu_state[i].second.dtype() == DType::kInt64) {  // num_batches_tracked
        CHECK(ops::equal(gpu_state[i].second.to(Device::cpu(0)), cpu_state[i].second));
      } else if (is_param) {
        const double lr = cpu.optimizer->lr();
        const std::vector<double> tolerance =
            optimizer == "adam"
                ? adam_step_tolerance(cpu_grads[p], lr)
                : sgd_step_tolerance(optimizer_state(cpu_opt, p, "momentum_buffer"), lr);
        worst_state = std::max(worst_state, check_update("updated " + name, before_copy[i].second,
                                                         gpu_state[i].second, cpu_state[i].second,
                                                         tolerance));
      } else {  // BatchNorm's running statistics, like the gradients
        worst_state = std::max(worst_state, check_scaled("updated " + name, gpu_state[i].second,
                                                         cpu_state[i].second, kRtol, kAtolOfMax));
      }
      if (is_param) ++p;
    }
    std::cout << optimizer << " " << schedule << " checkpoint " << pipeline::to_string(checkpoint)
              << " on " << gpus[0].str() << "," << gpus[1].str() << ", step " << step
              << " from a shared state: worst element as a fraction of its bound: gradients "
              << worst_grad << ", optimizer state " << worst_optimizer
              << ", updated weights and buffers " << worst_state << "\n";
    ++step;
  }
  REQUIRE(step == kSharedSteps);
}

TEST_CASE("one step from a shared state: GPU equals CPU (smooth model, GPipe, SGD)") {
  check_shared_state_steps("gpipe", Checkpoint::kNever, "sgd");
}

TEST_CASE("one step from a shared state: GPU equals CPU (smooth model, 1F1B, Adam)") {
  check_shared_state_steps("1f1b", Checkpoint::kNever, "adam");
}

TEST_CASE("one step from a shared state: GPU equals CPU (smooth model, GPipe, checkpoint always, SGD)") {
  check_shared_state_steps("gpipe", Checkpoint::kAlways, "sgd");
}

// ---- 2. whole runs ----

void check_run(const examples::Task& task, const testing::RunBounds& bounds,
               const std::string& schedule, Checkpoint checkpoint, const std::string& optimizer) {
  const std::vector<Device> gpus = testing::two_stage_gpus();
  if (gpus.empty()) return;
  std::ostringstream log;
  const TrainResult gpu =
      examples::train(testing::cross_run_config(gpus, schedule, checkpoint, optimizer), log, task);
  const TrainResult cpu = examples::train(
      testing::cross_run_config({Device::cpu(0), Device::cpu(1)}, schedule, checkpoint, optimizer),
      log, task);
  const testing::RunDistance d = testing::distance(cpu, gpu);
  std::cout << optimizer << " " << schedule << " checkpoint " << pipeline::to_string(checkpoint)
            << " on " << gpus[0].str() << "," << gpus[1].str() << ": " << d.str() << "\n";
  INFO(log.str());
  INFO(d.str());
  const auto& c = cpu.epochs.at(0);
  REQUIRE(c.step_losses.size() == 32);
  // The run learned something (chance: loss ln 10 = 2.30, accuracy 0.1).
  CHECK(c.step_losses.back() < 1.5);
  CHECK(c.test_accuracy > 0.6);
  CHECK(testing::violations(d, bounds) == std::vector<std::string>{});
  // Each GPU's allocator saw its stage's parameters and activations.
  REQUIRE(gpu.epochs.at(0).peak_bytes.size() == 2);
  CHECK(gpu.epochs[0].peak_bytes[0] > 0);
  CHECK(gpu.epochs[0].peak_bytes[1] > 0);
}

TEST_CASE("a whole run: GPU within rounding of CPU (smooth model, GPipe, SGD)") {
  check_run(testing::smooth_task(), testing::smooth_run_bounds("sgd"), "gpipe",
            Checkpoint::kNever, "sgd");
}

TEST_CASE("a whole run: GPU within rounding of CPU (smooth model, 1F1B, Adam)") {
  check_run(testing::smooth_task(), testing::smooth_run_bounds("adam"), "1f1b",
            Checkpoint::kNever, "adam");
}

TEST_CASE("a whole run of the example: GPU as close to CPU as two correct GEMMs (GPipe, SGD)") {
  check_run(examples::classifier_task(), testing::relu_run_bounds("sgd"), "gpipe",
            Checkpoint::kNever, "sgd");
}

TEST_CASE("a whole run of the example: GPU as close to CPU as two correct GEMMs (GPipe, checkpoint always, Adam: the default)") {
  check_run(examples::classifier_task(), testing::relu_run_bounds("adam"), "gpipe",
            Checkpoint::kAlways, "adam");
}

// ---- 3. --cuda-graphs ----

// The example's own run with --cuda-graphs (two stages on one GPU, and on two: whole steps
// captured and replayed, Note [A step as one graph]) equals its eager run bit for bit: every step's loss,
// the test accuracy, the final state (BatchNorm's statistics included). The last, smaller
// batch of the epoch (2048 = 32 x 64: none here) would run eagerly. With --precision fp16 the
// graphed steps scale, unscale and check for overflow on the device (Note [Loss scaling
// without a host read]); the eager ones on the host: with a power-of-two scale, the same bits.
TEST_CASE("a whole run of the example with --cuda-graphs equals its eager run bit for bit") {
  if (!testing::gpu_available_or_skip()) return;
  const std::vector<Device> one_gpu{Device::cuda(0), Device::cuda(0)};
  const std::vector<Device> two_gpus{Device::cuda(0), Device::cuda(1)};  // one graph over both
  struct Run {
    const std::vector<Device>* devices;
    const char* optimizer;
    autograd::Precision precision;
  };
  std::vector<Run> runs{{&one_gpu, "adam", autograd::Precision::kFloat32},
                        {&one_gpu, "sgd", autograd::Precision::kFloat32},
                        {&one_gpu, "adam", autograd::Precision::kFloat16}};
  if (device_count(DeviceType::kCUDA) >= 2) {
    runs.push_back({&two_gpus, "adam", autograd::Precision::kFloat16});
  }
  for (const auto& [devices, optimizer, precision] : runs) {
    INFO(optimizer << (precision == autograd::Precision::kFloat16 ? " fp16" : "") << " on "
                   << (devices == &two_gpus ? "cuda:0,cuda:1" : "cuda:0,cuda:0"));
    examples::TrainConfig config =
        testing::cross_run_config(*devices, "zb-h1", Checkpoint::kNever, optimizer);
    config.precision = precision;
    std::ostringstream log;
    const TrainResult eager = examples::train(config, log, examples::classifier_task());
    config.cuda_graphs = true;
    const TrainResult graphed = examples::train(config, log, examples::classifier_task());
    INFO(log.str());
    CHECK(graphed.epochs.at(0).step_losses == eager.epochs.at(0).step_losses);
    CHECK(graphed.epochs.at(0).test_accuracy == eager.epochs.at(0).test_accuracy);
    REQUIRE(graphed.final_state.size() == eager.final_state.size());
    for (size_t i = 0; i < eager.final_state.size(); ++i) {
      INFO(eager.final_state[i].first);
      CHECK(ops::equal(graphed.final_state[i].second, eager.final_state[i].second));
    }
    CHECK(log.str().find("graph pool") != std::string::npos);  // the peak-memory line says it
  }
}

}  // namespace
