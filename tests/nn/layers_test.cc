// Linear, Dropout, activations and the losses against hand-computed values.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/engine.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pw = pipewright;
namespace nn = pipewright::nn;
using pw::Tensor;

TEST_CASE("Linear: PyTorch's init bound, shapes, str and errors") {
  pw::Generator generator(3);
  pw::GeneratorGuard guard(generator);
  nn::Linear layer(16, 8);
  CHECK(layer.weight().shape() == pw::Shape{8, 16});
  CHECK(layer.bias().shape() == pw::Shape{8});
  const double bound = 1.0 / std::sqrt(16.0);
  for (float w : layer.weight().to_vector<float>()) CHECK(std::abs(w) <= bound);
  for (float b : layer.bias().to_vector<float>()) CHECK(std::abs(b) <= bound);
  CHECK(layer.str() == "Linear(in_features=16, out_features=8, bias=true)");
  CHECK(nn::Linear(2, 3, false).str() == "Linear(in_features=2, out_features=3, bias=false)");

  // Same generator state, same parameters.
  pw::Generator again(3);
  pw::GeneratorGuard guard_again(again);
  CHECK(pw::ops::equal(nn::Linear(16, 8).weight(), layer.weight()));

  nn::Linear big(784, 10);
  CHECK_THROWS_WITH(big(Tensor::ones({32, 100})),
                    "Linear(in_features=784): input has shape [32, 100], expected [*, 784]");
  CHECK_THROWS_AS(nn::Linear(0, 3), std::invalid_argument);
}

TEST_CASE("Linear computes x·Wᵀ + b, also on leading dims") {
  nn::Linear layer(2, 2);
  Tensor w = layer.weight(), b = layer.bias();
  w.copy_from(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}));
  b.copy_from(Tensor::from_vector<float>({0.5f, -1}));
  Tensor x = Tensor::from_vector<float>({1, 1, 2, 0}, {2, 2});
  CHECK(layer(x).to_vector<float>() == std::vector<float>{3.5f, 6, 2.5f, 5});
  Tensor y3 = layer(x.reshape({1, 2, 2}));
  CHECK(y3.shape() == pw::Shape{1, 2, 2});
  CHECK(y3.to_vector<float>() == std::vector<float>{3.5f, 6, 2.5f, 5});
  // The output starts as the bias on every row (autograd/linear.cc); with one row, too, it is
  // a tensor of its own and the bias stays as it was.
  Tensor one = layer(Tensor::from_vector<float>({1, 1}, {1, 2}));
  CHECK(one.to_vector<float>() == std::vector<float>{3.5f, 6});
  CHECK(b.to_vector<float>() == std::vector<float>{0.5f, -1});
  CHECK(one.raw_data() != b.raw_data());
}

TEST_CASE("Dropout: inverted scaling, replayable mask, identity in eval") {
  nn::Dropout dropout(0.25);
  Tensor x = Tensor::ones({1000});
  x.set_requires_grad(true);
  pw::Generator generator(11);
  Tensor y;
  {
    pw::GeneratorGuard guard(generator);
    y = dropout(x);
  }
  int zeros = 0;
  for (float v : y.to_vector<float>()) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      CHECK(v == Approx(1.0 / 0.75));
    }
  }
  CHECK(zeros > 200);
  CHECK(zeros < 300);
  CHECK(generator.offset() == 1000);  // the mask's range of the stream was reserved

  // Same (seed, offset): same mask. The gradient is the mask.
  pw::Generator replay(11);
  {
    pw::GeneratorGuard guard(replay);
    CHECK(pw::ops::equal(dropout(x), y));
  }
  pw::autograd::backward({y}, {Tensor::ones({1000})});
  CHECK(pw::ops::equal(x.grad(), y.detach()));

  dropout.eval();
  CHECK(dropout(x).is_same(x));
  CHECK(dropout.str() == "Dropout(p=0.25)");
  CHECK_THROWS_AS(nn::Dropout(1.0), std::invalid_argument);
  CHECK_THROWS_AS(nn::Dropout(-0.1), std::invalid_argument);
}

TEST_CASE("activations and Flatten") {
  Tensor x = Tensor::from_vector<float>({-1, 0.5f, 2, -3}, {2, 2});
  CHECK(nn::ReLU()(x).to_vector<float>() == std::vector<float>{0, 0.5f, 2, 0});
  CHECK(nn::Tanh()(x).to_vector<float>()[1] == Approx(std::tanh(0.5)));
  CHECK(nn::Sigmoid()(x).to_vector<float>()[0] == Approx(1 / (1 + std::exp(1.0))));
  CHECK(nn::Identity()(x).is_same(x));
  CHECK(nn::Flatten()(Tensor::ones({2, 3, 4})).shape() == pw::Shape{2, 12});
}

TEST_CASE("mse_loss matches hand computation for each reduction") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector<float>({0, 2, 5, 1}, {2, 2});  // squared errors 1 0 4 9
  CHECK(nn::mse_loss(a, b).item() == Approx(3.5));
  CHECK(nn::MSELoss(nn::Reduction::kSum)(a, b).item() == Approx(14));
  CHECK(nn::mse_loss(a, b, nn::Reduction::kNone).to_vector<float>() == std::vector<float>{1, 0, 4, 9});
  CHECK_THROWS_WITH(nn::mse_loss(a, Tensor::ones({4})),
                    Catch::Matchers::Contains("[2, 2]") && Catch::Matchers::Contains("[4]"));
}

TEST_CASE("cross_entropy matches a naive log-softmax, with label smoothing and reductions") {
  const std::vector<double> logits{1.0, 2.0, 0.5, -1.0, 0.0, 3.0};  // [2, 3]
  const std::vector<int64_t> target{1, 2};
  const double eps = 0.1;
  std::vector<double> expected;  // per sample
  for (int i = 0; i < 2; ++i) {
    double m = -1e300, z = 0.0;
    for (int c = 0; c < 3; ++c) m = std::max(m, logits[i * 3 + c]);
    for (int c = 0; c < 3; ++c) z += std::exp(logits[i * 3 + c] - m);
    double loss = 0.0;
    for (int c = 0; c < 3; ++c) {
      const double logp = logits[i * 3 + c] - m - std::log(z);
      const double q = (c == target[i] ? 1.0 - eps : 0.0) + eps / 3;
      loss -= q * logp;
    }
    expected.push_back(loss);
  }
  Tensor x = Tensor::from_vector(logits, {2, 3});
  Tensor t = Tensor::from_vector(target);
  CHECK(nn::cross_entropy(x, t, nn::Reduction::kMean, eps).item() ==
        Approx((expected[0] + expected[1]) / 2));
  CHECK(nn::CrossEntropyLoss(nn::Reduction::kSum, eps)(x, t).item() ==
        Approx(expected[0] + expected[1]));
  std::vector<double> none = nn::cross_entropy(x, t, nn::Reduction::kNone, eps).to_vector<double>();
  CHECK(none[0] == Approx(expected[0]));
  CHECK(none[1] == Approx(expected[1]));
  // Large logits stay finite (log-softmax is stable).
  Tensor huge = Tensor::from_vector<float>({1000, 0, -1000, 1000}, {2, 2});
  CHECK(std::isfinite(nn::cross_entropy(huge, Tensor::from_vector<int64_t>({1, 0})).item()));

  CHECK_THROWS_AS(nn::cross_entropy(x, Tensor::from_vector<int64_t>({0, 1, 2})), std::invalid_argument);
  // [B, T, C] logits, as a GPT ported from PyTorch hands them over: the fix is named, with the
  // differentiable reshape (Note [A loss without history], pipeline/stage_fn.cc).
  const Tensor sequence_target = Tensor::zeros({2, 4}, {.dtype = pw::DType::kInt64});
  CHECK_THROWS_WITH(nn::cross_entropy(Tensor::zeros({2, 4, 3}), sequence_target),
                    Catch::Matchers::StartsWith("cross_entropy: logits have shape [2, 4, 3]") &&
                        Catch::Matchers::EndsWith("; flatten the leading dimensions with "
                                                  "autograd::reshape(logits, {-1, C}) and "
                                                  "target.reshape({-1}) (Tensor::reshape on the "
                                                  "logits would drop their autograd history)"));
  CHECK_THROWS_AS(nn::cross_entropy(x, Tensor::from_vector<int64_t>({0, 3})), std::out_of_range);
  CHECK_THROWS_AS(nn::CrossEntropyLoss(nn::Reduction::kMean, 1.5), std::invalid_argument);
  CHECK(nn::CrossEntropyLoss(nn::Reduction::kMean, 0.1).str() ==
        "CrossEntropyLoss(reduction=mean, label_smoothing=0.1)");
}

TEST_CASE("a dtype or device mismatch entering a layer or loss names it, both tensors, the fix") {
  nn::Linear layer(2, 3);
  CHECK_THROWS_MATCHES(
      layer(Tensor::ones({4, 2}, {.dtype = pw::DType::kFloat64})), std::invalid_argument,
      Catch::Message("Linear(in_features=2, out_features=3, bias=true): the input ([4, 2] "
                     "float64 on cpu:0) does not match the weight ([3, 2] float32 on cpu:0): the "
                     "dtypes differ. Convert the input first: input.to(DType::kFloat32)"));
  CHECK_THROWS_WITH(layer(Tensor::ones({4, 2}, {.device = pw::Device::cpu(1)})),
                    Catch::EndsWith("the devices differ. Convert the input first: "
                                    "input.to(Device::cpu(0))"));
  nn::BatchNorm1d norm(2);
  CHECK_THROWS_WITH(norm(Tensor::ones({4, 2}, {.dtype = pw::DType::kFloat64})),
                    Catch::StartsWith("BatchNorm1d(") &&
                        Catch::Contains("Convert the input first: input.to(DType::kFloat32)"));

  const Tensor out = Tensor::ones({4, 1}, {.device = pw::Device::cpu(2)});
  CHECK_THROWS_MATCHES(
      nn::mse_loss(out, Tensor::zeros({4, 1}, {.dtype = pw::DType::kInt64})),
      std::invalid_argument,
      Catch::Message("mse_loss: the target ([4, 1] int64 on cpu:0) does not match the input ([4, "
                     "1] float32 on cpu:2): the dtypes and devices differ. Convert the target "
                     "first: target.to(DType::kFloat32).to(Device::cpu(2))"));
  const Tensor logits = Tensor::ones({4, 3}, {.device = pw::Device::cpu(2)});
  CHECK_THROWS_MATCHES(
      nn::cross_entropy(logits, Tensor::zeros({4}, {.dtype = pw::DType::kInt64})),
      std::invalid_argument,
      Catch::Message("cross_entropy: the target ([4] int64 on cpu:0) does not match the logits "
                     "([4, 3] float32 on cpu:2), which take int64 class indices on their device: "
                     "the devices differ. Convert the target first: target.to(Device::cpu(2))"));
  CHECK_THROWS_WITH(nn::cross_entropy(logits, Tensor::zeros({4}, {.device = pw::Device::cpu(2)})),
                    Catch::EndsWith("the dtypes differ. Convert the target first: "
                                    "target.to(DType::kInt64)"));
}

TEST_CASE("the functional losses pass as a loss of (output, target), their defaults filled in") {
  const std::function<Tensor(const Tensor&, const Tensor&)> mse = nn::mse_loss;
  const std::function<Tensor(const Tensor&, const Tensor&)> ce = nn::cross_entropy;
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector<float>({0, 2, 5, 1}, {2, 2});
  CHECK(mse(a, b).item() == nn::mse_loss(a, b, nn::Reduction::kMean).item());
  Tensor t = Tensor::from_vector<int64_t>({1, 0});
  CHECK(ce(a, t).item() == nn::cross_entropy(a, t, nn::Reduction::kMean, 0.0).item());
}
