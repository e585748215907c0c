// Linear's weight gradients added straight into .grad (Note [Weight gradients accumulated in
// place], autograd/node.h): the sums equal the independent sum of each backward's gradient,
// the in-place path allocates nothing of the weight's size (allocator counters, exact bytes),
// and it is refused whenever writing into .grad could be seen by someone else; under a 16-bit
// policy a deferred W keeps dY narrowed and sums bitwise what the undeferred backward does.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "tensor/allocator.h"
#include "tensor/ops.h"
#include "tests/compare.h"

namespace pw = pipewright;
namespace ag = pipewright::autograd;
using pw::Device;
using pw::DType;
using pw::Shape;
using pw::Tensor;
using pw::testing::bitwise_equal;

namespace {

/// Deterministic, distinct values in [-1, 1): v[i] = ((i·37 + salt) mod 101) / 50.5 - 1.
std::vector<double> pattern(int64_t n, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 37 + salt) % 101) / 50.5 - 1.0;
  return v;
}

Tensor make(int64_t rows, int64_t cols, int salt, Device device, DType dtype = DType::kFloat64) {
  Tensor t = Tensor::from_vector(pattern(rows * cols, salt), Shape{rows, cols}, device);
  return dtype == DType::kFloat64 ? t : t.to(dtype);
}

/// Σ_k gyₖᵀ·xₖ and Σ_k Σ_rows gyₖ, by plain loops in float64 (the reference).
struct Expected {
  std::vector<double> dw, db;
};
Expected reference(const std::vector<Tensor>& xs, const std::vector<Tensor>& gys) {
  const int64_t out = gys[0].size(1), in = xs[0].size(1);
  Expected e{std::vector<double>(out * in, 0.0), std::vector<double>(out, 0.0)};
  for (size_t k = 0; k < xs.size(); ++k) {
    const std::vector<double> x = xs[k].to_vector<double>(), gy = gys[k].to_vector<double>();
    const int64_t n = xs[k].size(0);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        e.db[o] += gy[r * out + o];
        for (int64_t i = 0; i < in; ++i) e.dw[o * in + i] += gy[r * out + o] * x[r * in + i];
      }
    }
  }
  return e;
}

void check_close(const Tensor& t, const std::vector<double>& expected) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(1e-12));
}

}  // namespace

TEST_CASE("Linear: .grad after several backward calls is the sum of their gradients") {
  const Device dev = Device::cpu(40);
  Tensor w = make(5, 4, 1, dev).set_requires_grad(true);
  Tensor b = Tensor::from_vector(pattern(5, 2), Shape{5}, dev).set_requires_grad(true);
  std::vector<Tensor> xs, gys;
  for (int k = 0; k < 4; ++k) {  // four "micro-batches" of different sizes
    xs.push_back(make(3 + k, 4, 10 + k, dev));
    gys.push_back(make(3 + k, 5, 20 + k, dev));
  }
  const bool deferred = GENERATE(false, true);
  for (size_t k = 0; k < xs.size(); ++k) {
    Tensor y = ag::linear(xs[k], w, b);
    if (deferred) {  // zero-bubble's W half, run later from the queue
      ag::WeightGradQueue queue;
      ag::backward({y}, {gys[k]}, {}, {.defer_weight_grads = &queue});
      REQUIRE(queue.size() == 1);
      queue.run();
    } else {
      ag::backward({y}, {gys[k]});
    }
  }
  const Expected e = reference(xs, gys);
  check_close(w.grad(), e.dw);
  check_close(b.grad(), e.db);
}

TEST_CASE("Linear: the second accumulation allocates no [out, in] gradient (exact bytes)") {
  const Device dev = Device::cpu(41);
  pw::Allocator& a = pw::allocator_for(dev);
  constexpr int64_t kOut = 64, kIn = 32, kRows = 8;
  Tensor w = make(kOut, kIn, 3, dev, DType::kFloat32).set_requires_grad(true);
  Tensor b = Tensor::zeros(Shape{kOut}, {DType::kFloat32, dev}).set_requires_grad(true);
  Tensor x = make(kRows, kIn, 4, dev, DType::kFloat32);
  Tensor gy = make(kRows, kOut, 5, dev, DType::kFloat32);
  const bool deferred = GENERATE(false, true);
  auto run_backward = [&] {
    Tensor y = ag::linear(x, w, b);
    const int64_t before = a.allocated();
    a.reset_peak();
    if (deferred) {
      ag::WeightGradQueue queue;
      ag::backward({y}, {gy}, {}, {.defer_weight_grads = &queue});
      queue.run();
    } else {
      ag::backward({y}, {gy});
    }
    return std::pair<int64_t, int64_t>{a.allocated() - before, a.peak() - before};
  };
  // First backward: .grad is created from the fresh dW [64, 32] and db [64], db made as
  // 1ᵀ·dY with a row of ones [1, 8] (gone once db is made).
  const auto [kept1, peak1] = run_backward();
  CHECK(kept1 == (kOut * kIn + kOut) * 4);
  CHECK(peak1 == (kOut * kIn + kOut + kRows) * 4);
  const Tensor dw1 = w.grad().clone(), db1 = b.grad().clone();
  // Second: dW goes into .grad by the GEMM (beta = 1), db as 1ᵀ·dY: the only allocation is
  // the row of ones [1, 8].
  const auto [kept2, peak2] = run_backward();
  CHECK(kept2 == 0);
  CHECK(peak2 == kRows * 4);
  CHECK(pw::ops::allclose(w.grad(), pw::ops::mul(dw1, 2.0), 1e-6, 1e-6));
  CHECK(pw::ops::allclose(b.grad(), pw::ops::mul(db1, 2.0), 1e-6, 1e-6));
}

TEST_CASE("Linear: a .grad someone else holds is still summed into, through the old path") {
  const Device dev = Device::cpu(42);
  pw::Allocator& a = pw::allocator_for(dev);
  Tensor w = make(6, 3, 6, dev).set_requires_grad(true);
  Tensor x = make(2, 3, 7, dev), gy = make(2, 6, 8, dev);
  ag::backward({ag::linear(x, w)}, {gy});
  const Tensor held = w.grad();  // the user's handle: writing into .grad is visible to it
  const std::vector<double> first = held.to_vector<double>();
  Tensor y = ag::linear(x, w);
  const int64_t before = a.allocated();
  a.reset_peak();
  ag::backward({y}, {gy});
  CHECK(a.peak() - before == 6 * 3 * 8);  // dW computed into a fresh tensor, then added
  CHECK(held.is_same(w.grad()));          // like PyTorch: .grad += g, same tensor
  std::vector<double> twice = first;
  for (double& v : twice) v *= 2;
  check_close(held, twice);
}

TEST_CASE("Linear: a weight listed in `inputs` gets its gradient returned, .grad untouched") {
  const Device dev = Device::cpu(43);
  Tensor w = make(4, 3, 9, dev).set_requires_grad(true);
  Tensor x = make(5, 3, 10, dev), gy = make(5, 4, 11, dev);
  ag::backward({ag::linear(x, w)}, {gy});
  const Tensor before = w.grad().clone();
  std::vector<Tensor> got = ag::backward({ag::linear(x, w)}, {gy}, {w});
  REQUIRE(got[0].defined());
  CHECK(pw::ops::equal(w.grad(), before));
  CHECK(pw::ops::allclose(got[0], before, 0, 1e-12));
}

TEST_CASE("Linear: retain_graph runs the in-place path twice through one graph") {
  const Device dev = Device::cpu(44);
  Tensor w = make(3, 2, 12, dev).set_requires_grad(true);
  Tensor b = Tensor::from_vector(pattern(3, 13), Shape{3}, dev).set_requires_grad(true);
  Tensor x = make(4, 2, 14, dev), gy = make(4, 3, 15, dev);
  Tensor y = ag::linear(x, w, b);
  for (int i = 0; i < 3; ++i) ag::backward({y}, {gy}, {}, {.retain_graph = true});
  const Expected e = reference({x, x, x}, {gy, gy, gy});
  check_close(w.grad(), e.dw);
  check_close(b.grad(), e.db);
}

// Note [What a deferred W keeps] (autograd/linear.cc): under a 16-bit policy the queue keeps
// dY rounded to 16 bits and db [out] in float32 instead of dY in float32, and W computes
// bitwise what the undeferred backward does, over several accumulations.
TEST_CASE("Linear under bf16: a deferred W keeps dY in 16 bits and db, and sums bitwise the same") {
  const Device dev = Device::cpu(43);
  pw::Allocator& a = pw::allocator_for(dev);
  constexpr int64_t kOut = 64, kIn = 32, kRows = 8;
  const auto precision = GENERATE(ag::Precision::kFloat32, ag::Precision::kBFloat16);
  const bool bf16 = precision == ag::Precision::kBFloat16;
  INFO((bf16 ? "bf16" : "fp32"));
  auto param = [&](Tensor t) { return t.set_requires_grad(true); };
  Tensor w_now = param(make(kOut, kIn, 9, dev, DType::kFloat32));
  Tensor b_now = param(make(1, kOut, 10, dev, DType::kFloat32).reshape(Shape{kOut}));
  Tensor w_later = param(w_now.detach().clone()), b_later = param(b_now.detach().clone());
  ag::PrecisionScope scope(precision);
  for (int k = 0; k < 3; ++k) {  // three micro-batches: .grad made, then added into twice
    Tensor x = make(kRows, kIn, 11 + k, dev, DType::kFloat32).set_requires_grad(true);
    ag::backward({ag::linear(x, w_now, b_now)}, {make(kRows, kOut, 21 + k, dev, DType::kFloat32)});

    const int64_t before = a.allocated();
    Tensor y = ag::linear(x, w_later, b_later);
    Tensor gy = make(kRows, kOut, 21 + k, dev, DType::kFloat32);
    ag::WeightGradQueue queue;
    {
      const std::vector<Tensor> dx = ag::backward({y}, {gy}, {x}, {.defer_weight_grads = &queue});
      REQUIRE(dx[0].defined());
    }
    y = Tensor();
    gy = Tensor();  // B has run: a stage drops dY, and only the queue keeps what W needs
    REQUIRE(queue.size() == 1);
    // Held since `before`: the node's x as the product took it and, made once per scope on
    // the first forward, W's 16-bit working copy (Note [The precision policy]); the rest is
    // what the queue keeps.
    const int64_t saved_x = bf16 ? kRows * kIn * 2 : 0;
    const int64_t working_copy = bf16 && k == 0 ? kOut * kIn * 2 : 0;
    const int64_t kept = a.allocated() - before - saved_x - working_copy;
    CHECK(kept == (bf16 ? kRows * kOut * 2 + kOut * 4 : kRows * kOut * 4));
    queue.run();
  }
  CHECK(bitwise_equal(w_later.grad(), w_now.grad()));
  CHECK(bitwise_equal(b_later.grad(), b_now.grad()));
}

// Note [What a deferred W keeps]: B takes the kept 16-bit dY only when it makes dX alone; a
// bias listed in `inputs` gets its gradient in B, from dY unrounded, as without W deferred.
TEST_CASE("Linear under bf16: a bias listed in `inputs` beside a deferred W gets dY unrounded") {
  const Device dev = Device::cpu(44);
  Tensor w = make(64, 32, 9, dev, DType::kFloat32).set_requires_grad(true);
  Tensor b = make(1, 64, 10, dev, DType::kFloat32).reshape(Shape{64}).set_requires_grad(true);
  Tensor x = make(8, 32, 11, dev, DType::kFloat32).set_requires_grad(true);
  // dY with bits below bfloat16's 8: rounding it first would change the bias's sum.
  const Tensor gy = pw::ops::mul(make(8, 64, 12, dev, DType::kFloat32), 1.0 + 1.0 / 1024);
  ag::PrecisionScope scope(ag::Precision::kBFloat16);
  const std::vector<Tensor> want = ag::backward({ag::linear(x, w, b)}, {gy}, {x, b});
  ag::WeightGradQueue queue;
  const std::vector<Tensor> got =
      ag::backward({ag::linear(x, w, b)}, {gy}, {x, b}, {.defer_weight_grads = &queue});
  REQUIRE(queue.size() == 1);  // W's weight gradient waits; the bias's came with B
  queue.run();
  CHECK(bitwise_equal(got[0], want[0]));
  CHECK(bitwise_equal(got[1], want[1]));
}
