// Building a Pipe by placement (torch.distributed.pipeline.sync.Pipe, which takes no balance):
// WithDevice; the partitions and devices derive_placement reads off mixed placements; every
// error, naming the child, its str() and the devices; and transparency: a make_pipe Pipe
// gives bitwise the outputs and gradients of the balance-built Pipe with the same cut, and
// the plain model's to float32 rounding.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/placement.h"
#include "pipeline/with_device.h"
#include "tensor/generator.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using Catch::Matchers::Contains;

namespace {

constexpr double kTol = 2e-6;  // float32 rounding of reassociated sums at these sizes
const Device kCpu0 = Device::cpu(0);
const Device kCpu1 = Device::cpu(1);
const Device kCpu2 = Device::cpu(2);

/// `module` in shared ownership, moved to `device`.
template <class M>
std::shared_ptr<M> placed(M module, Device device) {
  auto p = std::make_shared<M>(std::move(module));
  p->to(device);
  return p;
}

std::vector<std::string> names(const nn::NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) out.push_back(name);
  return out;
}

/// One parameter "weight" on `param_device` and one buffer "count" on `buffer_device`.
class SplitModule : public nn::Module {
 public:
  SplitModule(Device param_device, Device buffer_device) {
    register_parameter("weight", Tensor::zeros({2}, {.device = param_device}));
    register_buffer("count", Tensor::zeros({1}, {.device = buffer_device}));
  }
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override { return x; }
  std::string str() const override { return "SplitModule()"; }
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("no std::invalid_argument thrown");
  return "";
}

}  // namespace

TEST_CASE("WithDevice forwards to the wrapped module, registered as _module") {
  Generator g(11);
  GeneratorGuard guard(g);
  auto linear = std::make_shared<nn::Linear>(4, 3);
  WithDevice wrapper(linear, kCpu1);

  REQUIRE(wrapper.device() == kCpu1);
  REQUIRE(&wrapper.module() == linear.get());
  REQUIRE(wrapper.module_ptr() == linear);
  REQUIRE(names(wrapper.named_parameters()) ==
          std::vector<std::string>{"_module.weight", "_module.bias"});
  REQUIRE(names(wrapper.state_dict()) ==
          std::vector<std::string>{"_module.weight", "_module.bias"});
  REQUIRE(wrapper.str() == "WithDevice(" + linear->str() + ", device=cpu:1)");
  REQUIRE(wrapper.str() ==
          "WithDevice(Linear(in_features=4, out_features=3, bias=true), device=cpu:1)");
  // Declaring moves nothing; the Pipe moves.
  REQUIRE(linear->weight().device() == kCpu0);

  const Tensor x = randn({5, 4}, 12);
  REQUIRE(max_diff(wrapper.forward(x), linear->forward(x)) == 0);
  const nn::Tensors out = wrapper.forward(nn::Tensors{x});
  REQUIRE(out.size() == 1);
  REQUIRE(max_diff(out[0], linear->forward(x)) == 0);

  wrapper.eval();
  REQUIRE_FALSE(wrapper.is_training());
  REQUIRE_FALSE(linear->is_training());
  wrapper.train();
  REQUIRE(linear->is_training());

  // Inside a Sequential, torch's keys: "<index>._module.<name>".
  nn::Sequential model{nn::ReLU(), WithDevice(nn::Linear(4, 3), kCpu1)};
  REQUIRE(names(model.state_dict()) ==
          std::vector<std::string>{"1._module.weight", "1._module.bias"});
  REQUIRE_THAT(model.str(), Contains("(1): WithDevice(Linear(in_features=4, out_features=3"));

  REQUIRE_THAT(message_of([] {
                 WithDevice w{std::shared_ptr<nn::Module>(), kCpu2};
               }),
               Contains("WithDevice: the module to place on cpu:2 is null"));
}

TEST_CASE("placement_device: parameters, buffers, nested modules, WithDevice, else cpu:0") {
  REQUIRE(placement_device(*placed(nn::Linear(4, 4), kCpu2)) == kCpu2);
  REQUIRE(placement_device(nn::ReLU()) == kCpu0);
  // Buffers only (affine = false): the running statistics say where it lives.
  REQUIRE(placement_device(*placed(nn::BatchNorm1d(4, 1e-5, 0.1, false), kCpu1)) == kCpu1);
  // The declared device wins over where the tensors are now.
  REQUIRE(placement_device(WithDevice(placed(nn::Linear(4, 4), kCpu2), kCpu1)) == kCpu1);
  REQUIRE(placement_device(WithDevice(nn::ReLU(), kCpu2)) == kCpu2);

  nn::Sequential group{nn::Linear(4, 4), nn::ReLU(), nn::Linear(4, 4)};
  group.to(kCpu1);
  REQUIRE(placement_device(group) == kCpu1);
  nn::Sequential empty_group{nn::ReLU(), nn::Tanh()};
  REQUIRE(placement_device(empty_group) == kCpu0);
  // A nested WithDevice counts as its declared device.
  nn::Sequential declared{WithDevice(nn::ReLU(), kCpu1), placed(nn::Linear(4, 4), kCpu1)};
  REQUIRE(placement_device(declared) == kCpu1);
  nn::Sequential only_declared{nn::ReLU(), WithDevice(nn::Tanh(), kCpu2)};
  REQUIRE(placement_device(only_declared) == kCpu2);

  const std::string split = message_of([] { placement_device(SplitModule(kCpu0, kCpu1)); });
  REQUIRE(split ==
          "the module has its parameters and buffers on more than one device: cpu:0 (first: "
          "weight), cpu:1 (first: count); move it to one device with Module::to or wrap it in "
          "WithDevice: SplitModule()");
  nn::Sequential conflict{placed(nn::Linear(4, 4), kCpu1), WithDevice(nn::ReLU(), kCpu2)};
  REQUIRE_THAT(message_of([&] { placement_device(conflict); }),
               Contains("cpu:1 (first: 0.weight), cpu:2 (first: 1 (WithDevice))"));
}

TEST_CASE("derive_placement: consecutive children on one device form one partition") {
  SECTION("a fresh model lives on cpu:0: one partition") {
    const Placement p = derive_placement(small_mlp(1));
    REQUIRE(p.balance == std::vector<int>{5});
    REQUIRE(p.devices == std::vector<Device>{kCpu0});
    REQUIRE(p.child_devices == std::vector<Device>(5, kCpu0));
  }
  SECTION("mixed: parameters, WithDevice, a nested Sequential, a parameterless child") {
    nn::Sequential group{nn::Linear(4, 4), nn::Tanh(), nn::Linear(4, 4)};
    group.to(kCpu2);
    nn::Sequential model{placed(nn::Linear(4, 4), kCpu1),                     // cpu:1
                         WithDevice(nn::ReLU(), kCpu1),                       // cpu:1
                         std::move(group),                                    // cpu:2
                         placed(nn::BatchNorm1d(4), kCpu2),                   // cpu:2
                         nn::ReLU(),                                          // cpu:0 (no tensors)
                         WithDevice(placed(nn::Linear(4, 4), kCpu2), kCpu0),  // cpu:0, moved
                         nn::Linear(4, 4)};                                   // cpu:0
    const Placement p = derive_placement(model);
    REQUIRE(p.child_devices ==
            std::vector<Device>{kCpu1, kCpu1, kCpu2, kCpu2, kCpu0, kCpu0, kCpu0});
    REQUIRE(p.balance == std::vector<int>{2, 2, 3});
    REQUIRE(p.devices == std::vector<Device>{kCpu1, kCpu2, kCpu0});
  }
  SECTION("a parameterless child between two children on cpu:1 runs on cpu:0") {
    nn::Sequential model{placed(nn::Linear(4, 4), kCpu1), nn::ReLU(),
                         placed(nn::Linear(4, 4), kCpu1)};
    const Placement p = derive_placement(model);
    REQUIRE(p.balance == std::vector<int>{1, 1, 1});
    REQUIRE(p.devices == std::vector<Device>{kCpu1, kCpu0, kCpu1});
  }
  SECTION("a device that appears again starts a new partition") {
    nn::Sequential model{nn::Linear(4, 4), nn::ReLU(), placed(nn::Linear(4, 4), kCpu1),
                         WithDevice(nn::ReLU(), kCpu1), nn::Linear(4, 4)};
    const Placement p = derive_placement(model);
    REQUIRE(p.balance == std::vector<int>{2, 2, 1});
    REQUIRE(p.devices == std::vector<Device>{kCpu0, kCpu1, kCpu0});
  }
  SECTION("one child") {
    const Placement p = derive_placement(nn::Sequential{WithDevice(nn::ReLU(), kCpu2)});
    REQUIRE(p.balance == std::vector<int>{1});
    REQUIRE(p.devices == std::vector<Device>{kCpu2});
  }
  SECTION("CUDA devices are read the same way (nothing is allocated)") {
    nn::Sequential model{WithDevice(nn::ReLU(), Device::cuda(0)),
                         WithDevice(nn::Tanh(), Device::cuda(0)),
                         WithDevice(nn::ReLU(), Device::cuda(1))};
    const Placement p = derive_placement(model);
    REQUIRE(p.balance == std::vector<int>{2, 1});
    REQUIRE(p.devices == std::vector<Device>{Device::cuda(0), Device::cuda(1)});
  }
}

TEST_CASE("derive_placement and make_pipe errors name the child, its str() and the devices") {
  SECTION("an empty module") {
    REQUIRE(message_of([] { derive_placement(nn::Sequential()); }) ==
            "cannot derive a placement from an empty Sequential (a Pipe needs at least one "
            "child)");
    REQUIRE_THROWS_AS(make_pipe(nn::Sequential()), std::invalid_argument);
  }
  SECTION("a child with parameters on two devices") {
    nn::Sequential group{nn::Linear(4, 4), placed(nn::Linear(4, 2), kCpu1)};
    const std::string group_str = group.str();
    nn::Sequential model{nn::ReLU(), std::move(group)};
    const std::string message = message_of([&] { derive_placement(model); });
    REQUIRE(message ==
            "child 1 of the Sequential has its parameters and buffers on more than one device: "
            "cpu:0 (first: 0.weight), cpu:1 (first: 1.weight); move it to one device with "
            "Module::to or wrap it in WithDevice: " +
                group_str);
    REQUIRE_THAT(group_str, Contains("Linear(in_features=4, out_features=2, bias=true)"));
    REQUIRE_THROWS_WITH(make_pipe(std::move(model)), Contains("child 1 of the Sequential"));
  }
  SECTION("a child with its parameters on one device and its buffers on another") {
    nn::Sequential model{SplitModule(kCpu2, kCpu1)};
    REQUIRE_THAT(message_of([&] { derive_placement(model); }),
                 Contains("child 0 of the Sequential has its parameters and buffers on more "
                          "than one device: cpu:1 (first: count), cpu:2 (first: weight)"));
  }
  SECTION("a nested WithDevice that contradicts its siblings") {
    nn::Sequential group{nn::Linear(4, 4), WithDevice(nn::ReLU(), kCpu1)};
    nn::Sequential model;  // Sequential{std::move(group)} would be group itself
    model.push_back(std::move(group));
    REQUIRE_THAT(message_of([&] { derive_placement(model); }),
                 Contains("child 0 of the Sequential has its parameters and buffers on more "
                          "than one device: cpu:0 (first: 0.weight), cpu:1 (first: 1 "
                          "(WithDevice))"));
  }
  SECTION("the same module instance as two children") {
    auto relu = std::make_shared<nn::ReLU>();
    nn::Sequential model{nn::Linear(4, 4), relu, relu};
    REQUIRE(message_of([&] { derive_placement(model); }) ==
            "module with duplicate children is not supported (child 2 is child 1)");
  }
  SECTION("one module wrapped for two devices: a parameter shared across workers") {
    auto linear = std::make_shared<nn::Linear>(4, 4);
    nn::Sequential model{WithDevice(linear, kCpu0), WithDevice(linear, kCpu1)};
    REQUIRE(derive_placement(model).devices == std::vector<Device>{kCpu0, kCpu1});
    REQUIRE_THAT(message_of([&] { make_pipe(std::move(model)); }),
                 Contains("is shared with stage 0, which runs on another worker"));
    REQUIRE(linear->weight().device() == kCpu0);  // refused before anything moved
  }
  SECTION("a device that comes back after another is refused unless allow_revisit is set") {
    // ReLU has no tensors: without WithDevice it runs on cpu:0, between cpu:1 and cpu:2.
    auto model = [] {
      return nn::Sequential{nn::Linear(4, 4), placed(nn::Linear(4, 4), kCpu1), nn::ReLU(),
                            placed(nn::Linear(4, 3), kCpu2)};
    };
    REQUIRE(message_of([&] { make_pipe(model()); }) ==
            "make_pipe: cpu:0 holds partitions 0 (child 0) and 2 (child 2), with cpu:1 between "
            "them; child 2 (ReLU()) has no parameters or buffers, so it runs on cpu:0 unless "
            "wrapped in WithDevice; wrap it, or set PlacementOptions::allow_revisit to run 4 "
            "partitions, each with its own worker");
    REQUIRE_THROWS_AS(placement_pipe_options(model()), std::invalid_argument);
    Pipe pipe = make_pipe(model(), {.allow_revisit = true});
    REQUIRE(pipe.stage_devices() == std::vector<Device>{kCpu0, kCpu1, kCpu0, kCpu2});
    // A revisit that is not a forgotten WithDevice: the message names no child.
    nn::Sequential twice{nn::Linear(4, 4), placed(nn::Linear(4, 4), kCpu1), nn::Linear(4, 4)};
    REQUIRE(message_of([&] { make_pipe(std::move(twice)); }) ==
            "make_pipe: cpu:0 holds partitions 0 (child 0) and 2 (child 2), with cpu:1 between "
            "them; set PlacementOptions::allow_revisit to run 3 partitions, each with its own "
            "worker");
  }
  SECTION("the Pipe's own checks still apply") {
    REQUIRE(message_of([] { make_pipe(small_mlp(1), {.chunks = 0}); }) ==
            "number of chunks must be positive integer (chunks: 0)");
  }
}

TEST_CASE("make_pipe: torch Pipe's defaults, the derived cut, children moved to their device") {
  nn::Sequential model{nn::Linear(4, 8), WithDevice(nn::ReLU(), kCpu0),
                       WithDevice(nn::Linear(8, 8), kCpu1), WithDevice(nn::Tanh(), kCpu1),
                       placed(nn::Linear(8, 3), kCpu2)};
  SECTION("defaults") {
    Pipe pipe = make_pipe(std::move(model));
    REQUIRE(pipe.balance() == std::vector<int>{2, 2, 1});
    REQUIRE(pipe.stage_devices() == std::vector<Device>{kCpu0, kCpu1, kCpu2});
    REQUIRE(pipe.num_workers() == 3);
    REQUIRE(pipe.options().chunks == 1);
    REQUIRE(pipe.options().schedule == ScheduleSpec{.name = "gpipe",
                                                    .virtual_stages = 1,
                                                    .recompute = Checkpoint::kExceptLast});
    REQUIRE_FALSE(pipe.options().deferred_batch_norm);
    REQUIRE(pipe.options().seed == 0);
    REQUIRE(pipe.options().threads_per_worker == 0);
    // The WithDevice child moved to its declared device; the wrapper stays in the model.
    for (const auto& [name, t] : pipe.module()[2].named_parameters()) {
      CAPTURE(name);
      REQUIRE(t.device() == kCpu1);
    }
    REQUIRE(names(pipe.module().state_dict()) ==
            std::vector<std::string>{"0.weight", "0.bias", "2._module.weight", "2._module.bias",
                                     "4.weight", "4.bias"});
  }
  SECTION("the other options pass through") {
    Pipe pipe = make_pipe(std::move(model), {.chunks = 4,
                                             .schedule = {.name = "1f1b",
                                                          .recompute = Checkpoint::kNever},
                                             .deferred_batch_norm = true,
                                             .seed = 7,
                                             .threads_per_worker = 1});
    REQUIRE(pipe.options().chunks == 4);
    REQUIRE(pipe.options().schedule ==
            ScheduleSpec{.name = "1f1b", .recompute = Checkpoint::kNever});
    REQUIRE(pipe.options().deferred_batch_norm);
    REQUIRE(pipe.options().seed == 7);
    REQUIRE(pipe.options().threads_per_worker == 1);
    REQUIRE(pipe.balance() == std::vector<int>{2, 2, 1});
  }
  SECTION("placement_pipe_options gives the same balance and devices") {
    const PipeOptions options = placement_pipe_options(model, {.chunks = 3});
    REQUIRE(options.balance == std::vector<int>{2, 2, 1});
    REQUIRE(options.devices == std::vector<Device>{kCpu0, kCpu1, kCpu2});
    REQUIRE(options.chunks == 3);
    REQUIRE(options.schedule == ScheduleSpec{});  // gpipe, except_last
  }
}

// ---- transparency ----

namespace {

/// The cut and devices expected of model `which` of build().
struct Case {
  std::string name;
  std::vector<int> balance;
  std::vector<Device> devices;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"parameterless children declared", {2, 2, 1}, {kCpu0, kCpu1, kCpu2}},
      {"nested Sequentials", {1, 1}, {kCpu1, kCpu2}},
      {"cpu:0 twice, a Linear moved by WithDevice", {2, 1, 1, 1}, {kCpu0, kCpu1, kCpu0, kCpu1}},
  };
  return all;
}

/// Model `which`, its children placed as cases()[which] says, or, with place = false, the same
/// model on cpu:0 (WithDevice wrappers kept, so the parameter names match). Parameters are
/// drawn from `seed` in the same order either way.
nn::Sequential build(size_t which, uint64_t seed, bool place) {
  Generator g(seed);
  GeneratorGuard guard(g);
  auto at = [place](auto module, Device device) {
    auto p = std::make_shared<decltype(module)>(std::move(module));
    if (place) p->to(device);
    return p;
  };
  switch (which) {
    case 0:
      return nn::Sequential{at(nn::Linear(4, 8), kCpu0), WithDevice(nn::ReLU(), kCpu0),
                            at(nn::Linear(8, 8), kCpu1), WithDevice(nn::Tanh(), kCpu1),
                            at(nn::Linear(8, 3), kCpu2)};
    case 1: {
      auto first = std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU());
      auto second = std::make_shared<nn::Sequential>(
          nn::Sequential{nn::Linear(8, 8), nn::Tanh(), nn::Linear(8, 3)});
      if (place) {
        first->to(kCpu1);
        second->to(kCpu2);
      }
      return nn::Sequential{first, second};
    }
    default:
      // ReLU and Tanh have no tensors: they run on cpu:0, each a partition of its own.
      return nn::Sequential{nn::Linear(4, 8), nn::ReLU(), WithDevice(nn::Linear(8, 8), kCpu1),
                            nn::Tanh(), at(nn::Linear(8, 3), kCpu1)};
  }
}

struct Run {
  Tensor out, input_grad;
  double loss = 0;
};

Run pipe_run(Pipe& pipe, const Tensor& x0, const Tensor& target) {
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = pipe.forward(x);
  Tensor loss = nn::mse_loss(out, target.to(out.device()));
  loss.backward();
  return {out, x.grad(), loss.item()};
}

Run plain_run(nn::Sequential& model, const Tensor& x0, const Tensor& target) {
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = model.forward(x);
  Tensor loss = nn::mse_loss(out, target);
  loss.backward();
  return {out, x.grad(), loss.item()};
}

}  // namespace

TEST_CASE("a placement-built Pipe equals the balance-built Pipe and the plain model") {
  const size_t which = GENERATE(0u, 1u, 2u);
  const int chunks = GENERATE(1, 3, 4);
  const Checkpoint mode =
      GENERATE(Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever);
  const Case& c = cases()[which];
  CAPTURE(c.name, chunks, to_string(mode));

  Pipe placed_pipe = make_pipe(build(which, 1, true),
                               {.chunks = chunks,
                                .schedule = {.recompute = mode}, .allow_revisit = true});
  REQUIRE(placed_pipe.balance() == c.balance);
  REQUIRE(placed_pipe.stage_devices() == c.devices);
  Pipe cut_pipe(build(which, 1, true),
                {.balance = c.balance, .devices = c.devices, .chunks = chunks,
                 .schedule = {.recompute = mode}});
  nn::Sequential plain = build(which, 1, false);

  const Tensor x0 = randn({7, 4}, 2);
  const Tensor target = randn({7, 3}, 3);
  const Run placed_run = pipe_run(placed_pipe, x0, target);
  const Run cut_run = pipe_run(cut_pipe, x0, target);
  const Run ref = plain_run(plain, x0, target);

  REQUIRE(placed_run.out.device() == c.devices.back());
  // The same cut on the same devices: the same computation, bit for bit.
  REQUIRE(max_diff(placed_run.out, cut_run.out) == 0);
  REQUIRE(placed_run.loss == cut_run.loss);
  REQUIRE(max_diff(placed_run.input_grad, cut_run.input_grad) == 0);
  REQUIRE(max_grad_diff(placed_pipe.module(), cut_pipe.module()) == 0);
  // And the plain model, to rounding.
  REQUIRE(max_diff(placed_run.out, ref.out) <= kTol);
  REQUIRE(std::abs(placed_run.loss - ref.loss) <= kTol);
  REQUIRE(max_diff(placed_run.input_grad, ref.input_grad) <= kTol);
  REQUIRE(max_grad_diff(placed_pipe.module(), plain) <= kTol);
}

TEST_CASE("train_step of a placement-built Pipe equals the balance-built Pipe's") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1");
  const size_t which = GENERATE(0u, 1u, 2u);
  const int chunks = GENERATE(2, 4);
  const Case& c = cases()[which];
  CAPTURE(schedule, c.name, chunks);

  Pipe placed_pipe =
      make_pipe(build(which, 5, true), {.chunks = chunks,
                                        .schedule = {.name = schedule},
                                        .allow_revisit = true});
  Pipe cut_pipe(
      build(which, 5, true),
      {.balance = c.balance, .devices = c.devices, .chunks = chunks,
       .schedule = {.name = schedule}});
  nn::Sequential plain = build(which, 5, false);

  const Tensor x = randn({8, 4}, 6);
  const Tensor target = randn({8, 3}, 7);
  auto loss_fn = [](const Tensor& out, const Tensor& y) { return nn::mse_loss(out, y); };
  const StepResult placed_step = placed_pipe.train_step(x, target, loss_fn);
  const StepResult cut_step = cut_pipe.train_step(x, target, loss_fn);
  const Run ref = plain_run(plain, x, target);

  REQUIRE(placed_step.loss == cut_step.loss);
  REQUIRE(placed_step.microbatch_losses == cut_step.microbatch_losses);
  REQUIRE(max_grad_diff(placed_pipe.module(), cut_pipe.module()) == 0);
  REQUIRE(std::abs(placed_step.loss - ref.loss) <= kTol);
  REQUIRE(max_grad_diff(placed_pipe.module(), plain) <= kTol);
}

TEST_CASE("the example of placement.h and docs/pipeline.md") {
  nn::Linear first(784, 512), last(512, 10);
  first.to(Device::cpu(0));
  last.to(Device::cpu(1));
  nn::Sequential model{std::move(first),
                       pipeline::WithDevice(nn::ReLU(), Device::cpu(1)),  // else it runs on cpu:0
                       std::move(last)};
  pipeline::Pipe pipe = pipeline::make_pipe(std::move(model), {.chunks = 8});
  REQUIRE(pipe.balance() == std::vector<int>{1, 2});
  REQUIRE(pipe.stage_devices() == std::vector<Device>{kCpu0, kCpu1});
  REQUIRE(pipe.forward(randn({16, 784}, 9)).shape() == Shape{16, 10});
}
