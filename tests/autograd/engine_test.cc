// The engine: accumulation, detach, requires_grad propagation, no-grad, errors, the B/W split
// and the release of saved tensors.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pw = pipewright;
namespace ag = pipewright::autograd;
using pw::Shape;
using pw::Tensor;

namespace {

Tensor leaf(const std::vector<float>& values, const Shape& shape,
            pw::Device device = pw::Device::cpu(0)) {
  Tensor t = Tensor::from_vector(values, shape, device);
  t.set_requires_grad(true);
  return t;
}

Tensor random_leaf(const Shape& shape, uint64_t seed) {
  pw::Generator generator(seed);
  Tensor t = Tensor::empty(shape);
  generator.uniform_(t, -1.0, 1.0);
  t.set_requires_grad(true);
  return t;
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

}  // namespace

TEST_CASE("gradients accumulate across two backward calls") {
  Tensor x = leaf({1, 2, 3}, {3});
  ag::sum(ag::mul(x, x)).backward();  // d/dx Σx² = 2x
  CHECK(values(x.grad()) == std::vector<float>{2, 4, 6});
  ag::sum(ag::mul(x, 3.0)).backward();  // + 3
  CHECK(values(x.grad()) == std::vector<float>{5, 7, 9});
}

TEST_CASE("detach stops gradients") {
  Tensor x = leaf({1, 2, 3}, {3});
  ag::sum(ag::mul(x.detach(), x)).backward();  // only the second factor is differentiated
  CHECK(values(x.grad()) == std::vector<float>{1, 2, 3});
  CHECK_FALSE(x.detach().requires_grad());
}

TEST_CASE("requires_grad propagates from any input") {
  Tensor a = Tensor::ones({2}), b = leaf({1, 2}, {2});
  Tensor both = ag::add(a, b);
  CHECK(both.requires_grad());
  REQUIRE(both.grad_fn() != nullptr);
  CHECK(std::string(both.grad_fn()->name()) == "AddBackward");
  Tensor neither = ag::add(a, a);
  CHECK_FALSE(neither.requires_grad());
  CHECK(neither.grad_fn() == nullptr);
}

TEST_CASE("NoGradGuard records nothing, and restores the mode") {
  Tensor x = leaf({1, 2}, {2});
  {
    ag::NoGradGuard no_grad;
    CHECK_FALSE(ag::grad_mode_enabled());
    Tensor y = ag::exp(x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK(ag::grad_mode_enabled());
  CHECK(ag::exp(x).grad_fn() != nullptr);
}

TEST_CASE("backward errors") {
  Tensor x = leaf({1, 2}, {2});
  SECTION("a second backward through a freed graph names retain_graph") {
    Tensor loss = ag::sum(ag::exp(x));
    loss.backward();
    CHECK_THROWS_AS(loss.backward(), std::logic_error);
    CHECK_THROWS_WITH(loss.backward(), Catch::Matchers::Contains("retain_graph"));
  }
  SECTION("retain_graph allows it, and accumulates") {
    Tensor loss = ag::sum(ag::mul(x, 2.0));
    ag::backward({loss}, {}, {}, {.retain_graph = true});
    loss.backward();
    CHECK(values(x.grad()) == std::vector<float>{4, 4});
  }
  SECTION("a tensor that does not require grad") {
    Tensor c = Tensor::ones({1});
    CHECK_THROWS_AS(c.backward(), std::logic_error);
    CHECK_THROWS_WITH(c.backward(), Catch::Matchers::Contains("does not require grad"));
  }
  SECTION("an implied gradient needs a one-element output") {
    Tensor y = ag::exp(x);
    CHECK_THROWS_AS(y.backward(), std::invalid_argument);
    CHECK_THROWS_AS(y.backward(Tensor::ones({3})), std::invalid_argument);
  }
  SECTION("inputs must be leaves that require grad") {
    Tensor y = ag::exp(x);
    CHECK_THROWS_AS(ag::backward({ag::sum(y)}, {}, {y}), std::invalid_argument);
    CHECK_THROWS_AS(ag::backward({ag::sum(y)}, {}, {Tensor::ones({2})}), std::invalid_argument);
  }
}

TEST_CASE("backward returns the gradients of `inputs` without touching their .grad") {
  Tensor x = leaf({1, 2}, {2});
  Tensor w = leaf({3, 4}, {2});
  Tensor unused = leaf({0}, {1});
  std::vector<Tensor> grads = ag::backward({ag::sum(ag::mul(x, w))}, {}, {x, unused});
  REQUIRE(grads.size() == 2);
  CHECK(values(grads[0]) == std::vector<float>{3, 4});
  CHECK_FALSE(grads[1].defined());  // no path from the output
  CHECK_FALSE(x.grad().defined());
  CHECK(values(w.grad()) == std::vector<float>{1, 2});  // a parameter: accumulated
}

TEST_CASE("chunk: one node, several outputs, gradients assembled") {
  Tensor x = leaf({1, 2, 3, 4, 5}, {5, 1});
  std::vector<Tensor> parts = ag::chunk(x, 3);  // 2, 2, 1 rows
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].grad_fn() == parts[2].grad_fn());
  ag::add(ag::sum(ag::mul(parts[0], 2.0)), ag::sum(parts[2])).backward();
  CHECK(values(x.grad()) == std::vector<float>{2, 2, 0, 0, 1});
}

namespace {

/// A two-layer cell: the region's input x (a leaf) and parameters w1, b1, w2.
struct Cell {
  Tensor x = random_leaf({4, 3}, 1), w1 = random_leaf({5, 3}, 2), b1 = random_leaf({5}, 3),
         w2 = random_leaf({2, 5}, 4);
  Tensor forward() const { return ag::linear(ag::relu(ag::linear(x, w1, b1)), w2); }
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
};

}  // namespace

TEST_CASE("B/W split: deferred weight gradients equal an ordinary backward") {
  const Tensor grad_out = random_leaf({4, 2}, 5).detach();

  Cell plain;
  std::vector<Tensor> plain_dx = ag::backward({plain.forward()}, {grad_out}, {plain.x});

  Cell split;
  ag::WeightGradQueue queue;
  Tensor out = split.forward();
  std::weak_ptr<ag::Node> last = out.grad_fn();
  std::vector<Tensor> dx =
      ag::backward({out}, {grad_out}, {split.x}, {.defer_weight_grads = &queue});
  // B done: the input gradient is there, no parameter gradient yet.
  REQUIRE(dx[0].defined());
  CHECK(pw::ops::equal(dx[0], plain_dx[0]));
  for (const Tensor& p : split.params()) CHECK_FALSE(p.grad().defined());
  CHECK(queue.size() == 2);              // the two LinearBackward nodes' W halves
  CHECK_FALSE(last.lock()->released());  // keeps what W needs
  // W.
  queue.run();
  CHECK(queue.empty());
  CHECK(last.lock()->released());
  for (size_t i = 0; i < plain.params().size(); ++i) {
    CHECK(pw::ops::equal(split.params()[i].grad(), plain.params()[i].grad()));
  }
}

// Note [What W takes] (autograd/engine.cc): only the products leave their parameter gradients
// to W; LayerNorm's, BatchNorm's and Embedding's are computed in B, and their nodes keep
// nothing for W.
TEST_CASE("B/W split: W takes the products' weight gradients; B computes the reductions'") {
  const Tensor ids = Tensor::from_vector<int64_t>({2, 0, 2, 1});
  Tensor table = random_leaf({3, 3}, 11), gamma = random_leaf({3}, 12);
  Tensor beta = random_leaf({3}, 13), bn_gamma = random_leaf({3}, 14);
  Tensor bn_beta = random_leaf({3}, 15), w = random_leaf({2, 3}, 16);
  auto forward = [&] {
    const Tensor e = ag::embedding(ids, table);  // [4, 3]
    const Tensor n = ag::layer_norm(e, gamma, beta);
    const Tensor b = ag::batch_norm_train(n, bn_gamma, bn_beta, 1e-5);
    return ag::linear(b, w);  // [4, 2]
  };
  const Tensor grad_out = random_leaf({4, 2}, 17).detach();
  const std::vector<Tensor> reductions{table, gamma, beta, bn_gamma, bn_beta};
  ag::backward({forward()}, {grad_out});
  std::vector<Tensor> plain;
  for (Tensor p : reductions) plain.push_back(p.grad().clone());
  const Tensor plain_w = w.grad().clone();
  for (Tensor p : reductions) p.set_grad(Tensor());
  w.set_grad(Tensor());

  ag::WeightGradQueue queue;
  ag::backward({forward()}, {grad_out}, {}, {.defer_weight_grads = &queue});
  CHECK(queue.size() == 1);  // the Linear's W alone
  for (size_t i = 0; i < reductions.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(reductions[i].grad().defined());  // made in B, the same as without the split
    CHECK(pw::ops::equal(reductions[i].grad(), plain[i]));
  }
  CHECK_FALSE(w.grad().defined());
  queue.run();
  CHECK(pw::ops::equal(w.grad(), plain_w));
}

TEST_CASE("saved tensors are freed when backward is done") {
  // A virtual device of its own, so that nothing else touches its allocator.
  const pw::Device device = pw::Device::cpu(13);
  pw::Allocator& allocator = pw::allocator_for(device);
  const int64_t before = allocator.allocated();
  {
    Tensor x = leaf({0.5f, -1.0f, 2.0f, 0.25f}, {2, 2}, device);
    Tensor loss = ag::sum(ag::mul(ag::tanh(x), ag::exp(x)));  // saves tanh(x), exp(x), their y
    CHECK(allocator.allocated() > before + static_cast<int64_t>(x.nbytes() + loss.nbytes()));
    loss.backward();
    // The graph still exists (loss holds it), but its saved tensors are gone: only x, its
    // gradient and the loss remain.
    REQUIRE(loss.grad_fn() != nullptr);
    CHECK(allocator.allocated() ==
          before + static_cast<int64_t>(x.nbytes() + x.grad().nbytes() + loss.nbytes()));
  }
  CHECK(allocator.allocated() == before);
}

TEST_CASE("the graph dies with its outputs") {
  Tensor x = leaf({1, 2}, {2});
  std::weak_ptr<ag::Node> node;
  {
    Tensor y = ag::exp(ag::mul(x, 2.0));
    node = y.grad_fn();
    CHECK_FALSE(node.expired());
  }
  CHECK(node.expired());
}

TEST_CASE("a gradient is never aliased between two leaves") {
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  ag::sum(ag::add(a, b)).backward();  // AddBackward hands one tensor to both inputs
  CHECK_FALSE(a.grad().shares_storage(b.grad()));
  ag::sum(ag::mul(a, 2.0)).backward();
  CHECK(values(a.grad()) == std::vector<float>{3, 3});
  CHECK(values(b.grad()) == std::vector<float>{1, 1});
}

namespace {

/// y = x, recorded with a node that notes autograd::retains_graph() each time it is applied.
class NotesRetain final : public ag::Node {
 public:
  explicit NotesRetain(std::vector<bool>* seen) : seen_(seen) {}
  const char* name() const override { return "NotesRetainBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    seen_->push_back(ag::retains_graph());
    return {grads.at(0)};
  }
  void release_saved() override { mark_released(); }

 private:
  std::vector<bool>* seen_;
};

Tensor noting(const Tensor& x, std::vector<bool>* seen) {
  Tensor y = x.detach();
  ag::NodeRecorder::record(std::make_shared<NotesRetain>(seen), {x}, {&y});
  return y;
}

}  // namespace

TEST_CASE("retains_graph() tells a node whether the backward applying it keeps the graph") {
  std::vector<bool> seen;
  Tensor x = leaf({1, 2}, Shape{2});
  Tensor y = ag::sum(noting(x, &seen));
  REQUIRE_FALSE(ag::retains_graph());  // outside any backward
  ag::backward({y}, {}, {}, {.retain_graph = true});
  y.backward();
  REQUIRE(seen == std::vector<bool>{true, false});
  REQUIRE_FALSE(ag::retains_graph());  // restored after each

  // Deferred to a WeightGradQueue (x is a parameter of this backward): the queue applies the
  // node with the retain_graph of the backward that deferred it.
  for (const bool retain : {true, false}) {
    seen.clear();
    Tensor z = ag::sum(noting(x, &seen));
    ag::WeightGradQueue queue;
    ag::backward({z}, {}, {}, {.defer_weight_grads = &queue, .retain_graph = retain});
    REQUIRE(seen.empty());
    queue.run();
    REQUIRE(seen == std::vector<bool>{retain});
    REQUIRE_FALSE(ag::retains_graph());
  }
}
