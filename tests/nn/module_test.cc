// Module and Sequential: dotted names, slicing, load_state_dict, train/eval, to(device).
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tensor/allocator.h"
#include "tensor/ops.h"

namespace pw = pipewright;
namespace nn = pipewright::nn;
using pw::Tensor;

namespace {

std::vector<std::string> names(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [name, t] : list) out.push_back(name);
  return out;
}

nn::Sequential make_model() {
  return nn::Sequential{nn::Linear(4, 3), nn::BatchNorm1d(3), nn::ReLU(), nn::Linear(3, 2)};
}

}  // namespace

// The variadic constructor must not be chosen for copy or move construction.
static_assert(std::is_move_constructible_v<nn::Sequential>);
static_assert(!std::is_copy_constructible_v<nn::Sequential>);
static_assert(!std::is_constructible_v<nn::Sequential, nn::Sequential&>);
static_assert(!std::is_constructible_v<nn::Sequential, int>);

TEST_CASE("dotted names of a nested Sequential, in PyTorch's state_dict order") {
  nn::Sequential model = make_model();
  CHECK(names(model.named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"});
  CHECK(names(model.named_buffers()) ==
        std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
  CHECK(names(model.state_dict()) ==
        std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                 "1.running_var", "1.num_batches_tracked", "3.weight", "3.bias"});
  model.push_back(nn::Sequential{nn::Linear(2, 2), nn::Tanh()});
  CHECK(names(model.named_parameters()).back() == "4.0.bias");
  for (const Tensor& p : model.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("move construction moves; the variadic constructor takes modules and shared_ptrs") {
  nn::Sequential a = make_model();
  nn::Sequential b(std::move(a));
  CHECK(b.size() == 4);
  auto relu = std::make_shared<nn::ReLU>();
  nn::Sequential c{relu, nn::Identity()};
  CHECK(c.ptr(0) == relu);
  CHECK(c.size() == 2);
}

TEST_CASE("slice shares module instances and renames from 0") {
  nn::Sequential model = make_model();
  nn::Sequential part = model.slice(1, 3);
  REQUIRE(part.size() == 2);
  CHECK(part.ptr(0) == model.ptr(1));
  CHECK(part.ptr(1) == model.ptr(2));
  CHECK(names(part.named_buffers()).front() == "0.running_mean");
  CHECK(part.named_parameters()[0].second.is_same(model.named_parameters()[2].second));
  CHECK_THROWS_AS(model.slice(3, 5), std::out_of_range);
  CHECK_THROWS_AS(model[4], std::out_of_range);
  CHECK_THROWS_WITH(model[4], Catch::Matchers::Contains("4") && Catch::Matchers::Contains("size 4"));
}

TEST_CASE("train and eval reach every descendant") {
  nn::Sequential model = make_model();
  model.push_back(nn::Sequential{nn::ReLU()});
  model.eval();
  CHECK_FALSE(model.is_training());
  for (const auto& m : model) CHECK_FALSE(m->is_training());
  CHECK_FALSE(model[4].children()[0].second->is_training());
  model.train();
  CHECK(model[4].children()[0].second->is_training());
}

TEST_CASE("load_state_dict copies in place and reports precise errors") {
  nn::Sequential src = make_model(), dst = make_model();
  const Tensor dst_weight = dst.named_parameters()[0].second;
  dst.load_state_dict(src.state_dict());
  CHECK(pw::ops::equal(dst_weight, src.named_parameters()[0].second));  // same impl, new data
  CHECK(dst_weight.is_same(dst.named_parameters()[0].second));

  SECTION("missing and unexpected keys are listed") {
    nn::NamedTensors state = src.state_dict();
    state.erase(state.begin());  // drop 0.weight
    state.emplace_back("9.weight", Tensor::zeros({1}));
    CHECK_THROWS_AS(dst.load_state_dict(state), std::invalid_argument);
    CHECK_THROWS_WITH(dst.load_state_dict(state),
                      Catch::Matchers::Contains("missing keys [\"0.weight\"]") &&
                          Catch::Matchers::Contains("unexpected keys [\"9.weight\"]"));
  }
  SECTION("a shape mismatch names the key and both shapes, and changes nothing") {
    nn::NamedTensors state = src.state_dict();
    state[7].second = Tensor::zeros({3, 2});  // 3.weight is [2, 3]
    const Tensor before = dst_weight.clone();
    CHECK_THROWS_WITH(dst.load_state_dict(state),
                      Catch::Matchers::Contains("3.weight") && Catch::Matchers::Contains("[2, 3]") &&
                          Catch::Matchers::Contains("[3, 2]"));
    CHECK(pw::ops::equal(before, dst_weight));
  }
  SECTION("a dtype mismatch names the key and both dtypes") {
    nn::NamedTensors state = src.state_dict();
    state[6].second = Tensor::zeros({});  // num_batches_tracked is int64
    CHECK_THROWS_WITH(dst.load_state_dict(state),
                      Catch::Matchers::Contains("1.num_batches_tracked") &&
                          Catch::Matchers::Contains("int64") && Catch::Matchers::Contains("float32"));
  }
}

TEST_CASE("to(device) moves the bytes between the devices' allocators, in place") {
  // Devices of their own, so that other tests' tensors do not show in the counters.
  const pw::Device from = pw::Device::cpu(21), to = pw::Device::cpu(22);
  pw::Allocator &a_from = pw::allocator_for(from), &a_to = pw::allocator_for(to);
  nn::Sequential model{nn::Linear(4, 3, true, {.device = from}),
                       nn::BatchNorm1d(3, 1e-5, 0.1, true, true, {.device = from})};
  int64_t bytes = 0;
  for (const auto& [name, t] : model.state_dict()) bytes += static_cast<int64_t>(t.nbytes());
  const int64_t from_before = a_from.allocated(), to_before = a_to.allocated();
  const Tensor weight = model.named_parameters()[0].second;

  model.to(to);
  CHECK(a_from.allocated() == from_before - bytes);
  CHECK(a_to.allocated() == to_before + bytes);
  CHECK(weight.device() == to);  // the same handle sees the move
  Tensor y = model.forward(Tensor::ones({2, 4}, {.device = to}));
  CHECK(y.device() == to);
}

TEST_CASE("zero_grad clears every parameter's gradient") {
  nn::Sequential model = make_model();
  for (const Tensor& p : model.parameters()) {
    Tensor q = p;
    q.set_grad(Tensor::ones(p.shape()));
  }
  model.zero_grad();
  for (const Tensor& p : model.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("str() follows PyTorch's layout") {
  nn::Sequential model{nn::Linear(784, 1024), nn::ReLU(), nn::Sequential{nn::Identity(), nn::Flatten()}};
  CHECK(model.str() ==
        "Sequential(\n"
        "  (0): Linear(in_features=784, out_features=1024, bias=true)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): Identity()\n"
        "    (1): Flatten(start_dim=1)\n"
        "  )\n"
        ")");
}

TEST_CASE("a module without forward says so") {
  struct Empty : nn::Module {
    std::string str() const override { return "Empty()"; }
  } empty;
  CHECK_THROWS_AS(empty.forward(Tensor::ones({1})), std::logic_error);
  CHECK_THROWS_WITH(empty(nn::Tensors{Tensor::ones({1}), Tensor::ones({1})}),
                    Catch::Matchers::Contains("Empty()") && Catch::Matchers::Contains("2"));
}

TEST_CASE("a moved-from module throws std::logic_error naming it; assigning to it revives it") {
  nn::Sequential model = make_model();
  nn::Sequential kept = std::move(model);
  const std::string message =
      "Sequential() was moved from (std::move): use the module it was moved into";
  CHECK_THROWS_MATCHES(model(Tensor::ones({2, 4})), std::logic_error, Catch::Message(message));
  CHECK_THROWS_MATCHES(model.forward(Tensor::ones({2, 4})), std::logic_error,
                       Catch::Message(message));
  CHECK_THROWS_MATCHES(model.parameters(), std::logic_error, Catch::Message(message));
  CHECK_THROWS_AS(model.state_dict(), std::logic_error);
  CHECK_THROWS_AS(model.load_state_dict(kept.state_dict()), std::logic_error);
  CHECK_THROWS_AS(model.to(pw::Device::cpu(1)), std::logic_error);
  CHECK_THROWS_AS(model.train(), std::logic_error);
  CHECK_THROWS_AS(model.zero_grad(), std::logic_error);
  CHECK(kept(Tensor::ones({2, 4})).shape() == pw::Shape{2, 2});  // the new owner works

  nn::Linear layer(4, 3);
  nn::Linear owner = std::move(layer);
  CHECK_THROWS_WITH(layer(Tensor::ones({2, 4})), Catch::StartsWith("Linear(in_features=4") &&
                                                     Catch::EndsWith("was moved from (std::move): "
                                                                     "use the module it was "
                                                                     "moved into"));
  CHECK_THROWS_AS(layer.forward(Tensor::ones({2, 4})), std::logic_error);
  nn::BatchNorm1d norm(3);
  nn::BatchNorm1d norm_owner = std::move(norm);
  CHECK_THROWS_AS(norm.forward(Tensor::ones({2, 3})), std::logic_error);

  model = std::move(kept);  // a moved-from module assigned to is whole again
  CHECK(model.size() == 4);
  CHECK(model(Tensor::ones({2, 4})).shape() == pw::Shape{2, 2});
  CHECK(model.parameters().size() == 6);
}
