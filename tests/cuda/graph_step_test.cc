// A whole training step (zero_grad, forward, loss, backward, the optimizer) captured once as a
// DeviceGraph (tensor/graph.h) and replayed: every replayed step equals the eager step bit for
// bit (losses, weights, Adam's state), with a learning rate that changes every step
// (Note [Per-replay scalars]). Under cudasim the race detector checks every replay, and the
// capture refuses anything CUDA would (a host wait, a pageable copy, an allocation outside the
// graph's pool): a step that is not capture-safe fails here.
#include <catch2/catch.hpp>

#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim_adam.h"
#include "tensor/generator.h"
#include "tensor/graph.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"
#include "tests/pipeline/pipe_test_util.h"

namespace pipewright::testing {
namespace {

constexpr int kSteps = 8;
constexpr int64_t kRows = 12;

// 512 BatchNorm channels: the batch-norm kernels' 16 KiB scratch is a block of the size class
// the per-replay scalars once took from the graph's pool, so a replay's first kernels
// overwrote Adam's values (Note [Per-replay scalars]): this model caught it, a smaller one
// did not.
nn::Sequential model() {
  Generator g(3);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 512), nn::BatchNorm1d(512), nn::ReLU(), nn::Linear(512, 512),
                        nn::ReLU(), nn::Linear(512, 3));
}

struct Batch {
  Tensor x, y;
};

std::vector<Batch> batches() {
  std::vector<Batch> out;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<int64_t> labels;
    for (int64_t r = 0; r < kRows; ++r) labels.push_back((r * 7 + s) % 3);
    out.push_back({pipeline::testing::randn({kRows, 4}, 100 + s),
                   Tensor::from_vector(labels, {kRows})});
  }
  return out;
}

double lr_at(int step) { return 1e-2 / (1.0 + step); }  // a schedule the replays must follow

struct Run {
  std::vector<double> losses;
  nn::Sequential model;
  std::vector<Tensor> adam_state;
};

void keep_state(Run& run, const nn::Adam& adam) {
  for (const auto& [name, t] : adam.state_dict()) run.adam_state.push_back(t);
}

Run eager(const std::vector<Batch>& data) {
  Run run{{}, model(), {}};
  run.model.to(gpu());
  nn::Adam adam(run.model.parameters(), {.lr = lr_at(0), .weight_decay = 1e-3});
  for (int s = 0; s < kSteps; ++s) {
    adam.set_lr(lr_at(s));
    adam.zero_grad();
    Tensor loss = nn::cross_entropy(run.model.forward(data[s].x.to(gpu())), data[s].y.to(gpu()));
    loss.backward();
    adam.step();
    run.losses.push_back(loss.item());
  }
  keep_state(run, adam);
  return run;
}

TEST_CASE("a training step captured once and replayed equals the eager steps bit for bit",
          "[cuda][graph]") {
  if (!gpu_available_or_skip()) return;
  const std::vector<Batch> data = batches();
  const Run expected = eager(data);

  Run run{{}, model(), {}};
  run.model.to(gpu());
  nn::Adam adam(run.model.parameters(), {.lr = lr_at(0), .weight_decay = 1e-3});
  Stream::current(gpu()).synchronize();  // the copies to() made on the default stream
  const Stream stream = Stream::create(gpu());
  StreamGuard on_stream(stream);
  // Step 0 eagerly: Adam's state exists before the capture.
  adam.zero_grad();
  Tensor loss0 = nn::cross_entropy(run.model.forward(data[0].x.to(gpu())), data[0].y.to(gpu()));
  loss0.backward();
  adam.step();
  run.losses.push_back(loss0.item());

  // The step's inputs live in tensors the graph reads (Note [Staged inputs]); each replay
  // copies its batch there, with the slots, in one copy.
  DeviceGraph graph(gpu());
  const std::vector<Tensor> staged =
      graph.stage_inputs({{data[1].x.shape(), data[1].x.dtype()},
                          {data[1].y.shape(), data[1].y.dtype()}});
  const Tensor& x = staged[0];
  const Tensor& y = staged[1];
  graph.begin_capture(stream);
  adam.zero_grad();
  Tensor loss = nn::cross_entropy(run.model.forward(x), y);
  loss.backward();
  adam.step();
  graph.end_capture();
  CHECK(graph.pool_bytes() > 0);
  for (int s = 1; s < kSteps; ++s) {
    adam.set_lr(lr_at(s));  // read by the replay's fill, as an eager step reads it
    // Step 1's batch from the host, step 2's already on the device, the rest from the host.
    if (s == 2) {
      graph.replay(stream, {data[s].x.to(gpu()), data[s].y.to(gpu())});
    } else {
      graph.replay(stream, {data[s].x, data[s].y});
    }
    run.losses.push_back(loss.item());
    graph.commit();
  }
  keep_state(run, adam);

  REQUIRE(run.losses.size() == expected.losses.size());
  for (size_t s = 0; s < run.losses.size(); ++s) {
    INFO("step " << s);
    CHECK(run.losses[s] == expected.losses[s]);
  }
  const auto params = run.model.parameters(), expected_params = expected.model.parameters();
  for (size_t i = 0; i < params.size(); ++i) check_bitwise_equal(params[i], expected_params[i]);
  REQUIRE(run.adam_state.size() == expected.adam_state.size());
  for (size_t i = 0; i < run.adam_state.size(); ++i) {
    check_bitwise_equal(run.adam_state[i], expected.adam_state[i]);
  }
}

}  // namespace
}  // namespace pipewright::testing

namespace pipewright::testing {
namespace {

// Note [One launch per bucket] (nn/optim_adam.cc): a captured Adam step updates the members
// of a bucket in one launch, each reading its own step's values (4 per member, Note [Tensor
// lists]). Members that part after the capture (here parameter 0 steps alone, eagerly,
// between two replays) keep their own bias corrections: the replays equal eager steps. No host
// wait comes between the replays, so the second replay must not write its values before the
// first one's copy has read them (Note [One host area], tensor/graph.cc).
TEST_CASE("a replayed Adam bucket steps each member at its own step count", "[cuda][graph]") {
  if (!gpu_available_or_skip()) return;
  const auto make = [] {
    std::vector<Tensor> params;
    for (int k = 0; k < 2; ++k) {
      Tensor p = random_tensor({300}, DType::kFloat32, 40 + k).to(gpu());
      p.set_requires_grad(true);
      p.set_grad(random_tensor({300}, DType::kFloat32, 50 + k).to(gpu()));
      params.push_back(p);
    }
    return params;
  };
  std::vector<Tensor> eager = make(), replayed = make();
  nn::Adam eager_adam(eager, {.lr = 1e-2});
  nn::Adam adam(replayed, {.lr = 1e-2});
  eager_adam.step();
  eager_adam.step();
  eager_adam.step({0});
  eager_adam.step();
  Stream::current(gpu()).synchronize();  // the copies to() made on the default stream
  const Stream stream = Stream::create(gpu());
  StreamGuard on_stream(stream);
  adam.step();  // eagerly: the state exists before the capture
  DeviceGraph graph(gpu());
  graph.begin_capture(stream);
  adam.step();
  graph.end_capture();
  graph.replay(stream);
  graph.commit();
  adam.step({0});  // parameter 0 one step ahead of parameter 1
  graph.replay(stream);
  graph.commit();
  for (size_t k = 0; k < 2; ++k) {
    INFO("parameter " << k);
    check_bitwise_equal(replayed[k], eager[k]);
  }
}

}  // namespace
}  // namespace pipewright::testing
