// The transformer building blocks against PyTorch: tests/nn/fixtures/transformer.safetensors,
// written by bench/peers/transformer_fixtures.py (python3-torch), holds each layer's
// parameters, input, output and gradients in float64. Each module here loads the same
// parameters, runs the same input and upstream gradient, and must agree: to 1e-12 in float64
// (the same formulas, another order of rounding) and 1e-5 in float32 (our float32 kernels
// against torch's float64 numbers). Also clip_grad_norm_, the learning-rate schedulers and
// AdamW with parameter groups.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "autograd/engine.h"
#include "nn/attention.h"
#include "nn/clip_grad.h"
#include "nn/embedding.h"
#include "nn/gelu.h"
#include "nn/linear.h"
#include "nn/lr_scheduler.h"
#include "nn/normalization.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
#include "nn/transformer.h"
#include "tensor/ops.h"

using namespace pipewright;
namespace {

const nn::SafetensorsFile& fixtures() {
  static const nn::SafetensorsFile file =
      nn::load_safetensors("tests/nn/fixtures/transformer.safetensors");
  return file;
}

Tensor fixture(const std::string& name, DType dtype = DType::kFloat64) {
  const Tensor& t = fixtures().at(name);
  return is_floating(t.dtype()) ? t.to(dtype).clone() : t;
}

/// max |a - b| / max(1, max |b|).
double rel_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double scale = 1.0;
  for (double v : b.to_vector<double>()) scale = std::max(scale, std::abs(v));
  return ops::max_abs_diff(a.to(DType::kFloat64), b) / scale;
}

double tolerance(DType dtype) { return dtype == DType::kFloat64 ? 1e-12 : 1e-5; }

/// Loads "<name>.param.*" into m, runs "<name>.x" forward and "<name>.dy" backward, and
/// compares y, dx and every parameter's gradient with PyTorch's.
void check_against_torch(nn::Module& m, const std::string& name, DType dtype) {
  nn::NamedTensors state;
  const std::string prefix = name + ".param.";
  for (const auto& [key, t] : fixtures().tensors) {
    if (key.rfind(prefix, 0) == 0) state.emplace_back(key.substr(prefix.size()), t.to(dtype));
  }
  m.load_state_dict(state);
  Tensor x = fixture(name + ".x", dtype);
  const bool floating = is_floating(x.dtype());
  if (floating) x.set_requires_grad(true);
  const Tensor y = m.forward(x);
  CHECK(rel_error(y, fixture(name + ".y")) < tolerance(dtype));
  const std::vector<Tensor> dx = autograd::backward(
      {y}, {fixture(name + ".dy", dtype)}, floating ? std::vector<Tensor>{x} : std::vector<Tensor>{});
  if (floating) CHECK(rel_error(dx[0], fixture(name + ".dx")) < tolerance(dtype));
  for (const auto& [pname, p] : m.named_parameters()) {
    INFO("gradient of " << pname);
    REQUIRE(p.grad().defined());
    CHECK(rel_error(p.grad(), fixture(name + ".grad." + pname)) < tolerance(dtype));
  }
}

}  // namespace

TEST_CASE("transformer layers equal PyTorch's forward and gradients", "[nn][fixtures]") {
  const DType dtype = GENERATE(DType::kFloat64, DType::kFloat32);
  const TensorOptions options{.dtype = dtype};
  INFO(dtype_name(dtype));
  {
    SECTION("Embedding(10, 4, padding_idx=2)") {
      nn::Embedding m(10, 4, 2, options);
      check_against_torch(m, "embedding", dtype);
      CHECK(ops::equal(m.weight().grad().slice(2, 3), Tensor::zeros({1, 4}, options)));
    }
    SECTION("LayerNorm(6)") {
      nn::LayerNorm m(6, 1e-5, true, true, options);
      check_against_torch(m, "layer_norm", dtype);
    }
    SECTION("RMSNorm(6, eps=1e-6)") {
      nn::RMSNorm m(6, 1e-6, true, options);
      check_against_torch(m, "rms_norm", dtype);
    }
    SECTION("GELU()") {
      nn::GELU m;
      check_against_torch(m, "gelu", dtype);
    }
    SECTION("GELU(approximate='tanh')") {
      nn::GELU m("tanh");
      check_against_torch(m, "gelu_tanh", dtype);
    }
    SECTION("Linear(6, 5) over [B, T, C]") {
      nn::Linear m(6, 5, true, options);
      check_against_torch(m, "linear_3d", dtype);
    }
    SECTION("CausalSelfAttention(8, 2), flash, fused and reference kernels") {
      for (nn::AttentionKernel kernel : {nn::AttentionKernel::kFlash, nn::AttentionKernel::kFused,
                                         nn::AttentionKernel::kReference}) {
        nn::CausalSelfAttention m(8, 2, {.kernel = kernel}, options);
        check_against_torch(m, "attention", dtype);
      }
    }
    SECTION("TransformerBlock(8, 2)") {
      nn::TransformerBlock m(8, 2, {}, options);
      check_against_torch(m, "block", dtype);
    }
  }
}

TEST_CASE("clip_grad_norm equals torch.nn.utils.clip_grad_norm_", "[nn][fixtures]") {
  nn::Tensors params;
  for (int i = 0; i < 3; ++i) {
    Tensor grad = fixture("clip.grad." + std::to_string(i));
    Tensor p = Tensor::zeros(grad.shape(), {.dtype = DType::kFloat64});
    p.set_requires_grad(true);
    p.set_grad(grad);
    params.push_back(p);
  }
  const std::vector<std::pair<double, std::string>> orders{{2.0, "2"}, {1.0, "1"}, {INFINITY, "inf"}};
  for (const auto& [order, key] : orders) {
    INFO("norm of order " << key);
    const double want = fixture("clip.norm." + key).item();
    CHECK(std::abs(nn::total_grad_norm(params, order) - want) < 1e-12 * want);
  }
  const double returned = nn::clip_grad_norm(params, 0.5);
  CHECK(std::abs(returned - fixture("clip.returned").item()) < 1e-12 * returned);
  for (int i = 0; i < 3; ++i) {
    CHECK(rel_error(params[i].grad(), fixture("clip.clipped." + std::to_string(i))) < 1e-15);
  }
}

TEST_CASE("learning-rate schedulers equal torch.optim.lr_scheduler's", "[nn][fixtures]") {
  Tensor p = Tensor::zeros({1});
  p.set_requires_grad(true);
  using Make = std::function<std::unique_ptr<nn::LRScheduler>(nn::Optimizer&)>;
  struct Case {
    const char* key;
    Make make;
    int64_t steps;  // past a cosine's end torch's curve rises again, ours stays at min_lr
  };
  const Case cases[] = {
      {"lr.warmup_cosine", [](nn::Optimizer& o) { return std::make_unique<nn::WarmupCosineLR>(o, 5, 25, 0.05); }, 26},
      {"lr.cosine", [](nn::Optimizer& o) { return std::make_unique<nn::WarmupCosineLR>(o, 0, 25); }, 26},
      {"lr.step", [](nn::Optimizer& o) { return std::make_unique<nn::StepLR>(o, 7, 0.3); }, 30},
      {"lr.constant", [](nn::Optimizer& o) { return std::make_unique<nn::ConstantLR>(o); }, 30},
  };
  for (const Case& c : cases) {
    INFO(c.key);
    nn::SGD opt({p}, {.lr = 0.5});
    const std::unique_ptr<nn::LRScheduler> schedule = c.make(opt);
    const std::vector<double> want = fixture(c.key).to_vector<double>();
    for (int64_t step = 0; step < c.steps; ++step) {
      INFO("step " << step);
      CHECK(std::abs(opt.lr() - want[step]) < 1e-14);
      schedule->step();
    }
  }
}

TEST_CASE("AdamW with parameter groups equals torch.optim.AdamW's", "[nn][fixtures]") {
  Tensor w = fixture("adamw.w0"), b = fixture("adamw.b0");
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  nn::AdamW opt(nn::weight_decay_groups({b, w}, 0.1), {.lr = 0.05});  // w decays, b does not
  for (int step = 0; step < 5; ++step) {
    w.set_grad(fixture("adamw.grad_w." + std::to_string(step)));
    b.set_grad(fixture("adamw.grad_b." + std::to_string(step)));
    opt.step();
  }
  CHECK(rel_error(w, fixture("adamw.w5")) < 1e-14);
  CHECK(rel_error(b, fixture("adamw.b5")) < 1e-14);
}
