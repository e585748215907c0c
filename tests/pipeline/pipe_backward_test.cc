// Backward through Pipe::forward's output beyond one plain call, against the un-pipelined
// model: retain_graph (torch semantics: each backward accumulates once more, checkpointed
// cells are not recomputed again), the B/W split of the caller's backward (the pipeline runs
// once), and a backward after a failed one.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>

#include "autograd/engine.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {
constexpr double kTol = 2e-6;  // float32 rounding of reassociated sums at these sizes

const autograd::BackwardOptions kRetain{.retain_graph = true};

/// The plain model's output, loss and input leaf for x0 (its gradients accumulate in `plain`).
struct Plain {
  Tensor x, loss;
};
Plain plain_loss(nn::Sequential& plain, const Tensor& x0, const Tensor& target) {
  Tensor x = x0.clone().set_requires_grad(true);
  return {x, nn::mse_loss(plain.forward(x), target)};
}
}  // namespace

TEST_CASE("backward with retain_graph, twice, accumulates as through the plain model") {
  const Checkpoint mode =
      GENERATE(Checkpoint::kNever, Checkpoint::kExceptLast, Checkpoint::kAlways);
  const std::vector<int> balance = GENERATE(values<std::vector<int>>({{2, 3}, {1, 2, 2}}));
  const int chunks = GENERATE(1, 3, 4);
  const bool tensor_method = GENERATE(false, true);  // loss.backward(options) or autograd's
  CAPTURE(to_string(mode), balance, chunks, tensor_method);

  nn::Sequential plain = small_mlp(3);
  Pipe pipe(small_mlp(3), {.balance = balance,
                           .devices = cpus(0, static_cast<int>(balance.size())),
                           .chunks = chunks,
                           .schedule = {.recompute = mode}});
  const Tensor x0 = randn({7, 4}, 4), target = randn({7, 3}, 5);
  Plain ref = plain_loss(plain, x0, target);
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = pipe.forward(x);
  Tensor loss = nn::mse_loss(out, target.to(out.device()));

  auto backward = [&](const Tensor& l, const autograd::BackwardOptions& options) {
    if (tensor_method) {
      l.backward(options);
    } else {
      autograd::backward({l}, {}, {}, options);
    }
  };
  backward(ref.loss, kRetain);
  backward(loss, kRetain);
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  REQUIRE(max_diff(x.grad(), ref.x.grad()) <= kTol);
  const StepCounters first = pipe.last_counters();

  backward(ref.loss, {});  // the last one: frees the graphs
  backward(loss, {});
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);  // 2x, as the plain model's
  REQUIRE(max_diff(x.grad(), ref.x.grad()) <= kTol);
  const StepCounters second = pipe.last_counters();
  for (size_t s = 0; s < balance.size(); ++s) {
    REQUIRE(second.backwards[s] == 2 * first.backwards[s]);
    REQUIRE(second.recomputes[s] == first.recomputes[s]);  // the recomputed graphs were kept
  }

  REQUIRE_THROWS_WITH(loss.backward(), Catch::Contains("second time"));
  REQUIRE_THROWS_WITH(ref.loss.backward(), Catch::Contains("second time"));
}

TEST_CASE("a deferred backward (B/W split) through forward()'s output runs the pipeline once") {
  const int runs = GENERATE(1, 2);  // 2: the first retains the graph
  CAPTURE(runs);
  nn::Sequential plain = small_mlp(6);
  Pipe pipe(small_mlp(6), {.balance = {2, 3}, .devices = cpus(2, 2), .chunks = 4});
  const Tensor x0 = randn({8, 4}, 7), target = randn({8, 3}, 8);
  Plain ref = plain_loss(plain, x0, target);
  ref.loss.backward(kRetain);
  const Tensor ref_dx = ref.x.grad().clone();
  if (runs == 2) ref.loss.backward();

  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = pipe.forward(x);
  Tensor loss = nn::mse_loss(out, target.to(out.device()));
  for (int run = 0; run < runs; ++run) {
    autograd::WeightGradQueue queue;
    const std::vector<Tensor> dx = autograd::backward(
        {loss}, {}, {x}, {.defer_weight_grads = &queue, .retain_graph = run + 1 < runs});
    REQUIRE(max_diff(dx.at(0), ref_dx) <= kTol);  // B: the input's gradient, returned now
    REQUIRE_FALSE(queue.empty());
    queue.run();                                   // W: the pipeline's run did it already
  }
  REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  REQUIRE(pipe.last_counters().backwards == std::vector<int>{4 * runs, 4 * runs});
}

TEST_CASE("a backward after a failed one through a retained graph names the cause") {
  auto armed = std::make_shared<std::atomic<int>>(1);  // the first backward call throws
  nn::Sequential model = small_mlp(9);
  model.push_back(std::make_shared<ThrowInBackward>(armed, "stage exploded in backward"));
  Pipe pipe(std::move(model), {.balance = {3, 3}, .devices = cpus(0, 2), .chunks = 2});
  Tensor out = pipe.forward(randn({4, 4}, 10));
  Tensor loss = nn::mse_loss(out, randn({4, 3}, 11, out.device()));
  REQUIRE_THROWS_MATCHES(loss.backward(kRetain), std::overflow_error,
                         Catch::Message("stage exploded in backward"));
  REQUIRE_THROWS_MATCHES(loss.backward(kRetain), std::logic_error,
                         Catch::Message("PipeBackward: an earlier backward through this output "
                                        "failed, and its step with it; run Pipe::forward "
                                        "again"));
}
