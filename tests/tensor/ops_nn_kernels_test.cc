// The kernels nn/ calls directly (cross-entropy, batch norm, optimizers, index_select) against
// closed forms, naive loops in double and finite differences.
#include <catch2/catch.hpp>
#include <cmath>

#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "tests/tensor/test_util.h"

using namespace pipewright;
using namespace pipewright::testing;

namespace {

const Kernels& cpu() { return kernels_for(DeviceType::kCPU); }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

// ---- cross-entropy ----

TEMPLATE_TEST_CASE("cross_entropy with label smoothing matches the closed form", "[loss]", float,
                   double) {
  const int64_t n = 5, c = 4;
  const auto zv = random_values(n * c, 41, -3.0, 3.0);
  const Tensor logp = ops::log_softmax(tensor_of<TestType>(zv, {n, c}));
  const std::vector<int64_t> targets = {0, 3, 1, 1, 2};
  const Tensor target = Tensor::from_vector(targets);
  const auto lp = values(logp);
  for (double eps : {0.0, 0.1, 1.0}) {
    INFO("eps=" << eps);
    Tensor loss = Tensor::empty({n}, {logp.dtype()});
    cpu().cross_entropy(logp, target, eps, loss);
    // Closed form: -Σ_c q[i, c] logp[i, c], q = (1-eps) onehot + eps/C.
    std::vector<double> expected(n, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < c; ++k) {
        const double q = (k == targets[i] ? 1.0 - eps : 0.0) + eps / c;
        expected[i] -= q * lp[i * c + k];
      }
    }
    REQUIRE(max_rel_err(values(loss), expected) < tolerance<TestType>());

    // d loss / d logits through log_softmax = g * (softmax - q).
    const auto gv = random_values(n, 42);
    Tensor grad_logits = Tensor::empty({n, c}, {logp.dtype()});
    cpu().cross_entropy_backward(logp, target, eps, tensor_of<TestType>(gv, {n}), grad_logits);
    const auto g = rounded<TestType>(gv);
    std::vector<double> expected_grad(n * c);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < c; ++k) {
        const double q = (k == targets[i] ? 1.0 - eps : 0.0) + eps / c;
        expected_grad[i * c + k] = g[i] * (std::exp(lp[i * c + k]) - q);
      }
    }
    REQUIRE(max_rel_err(values(grad_logits), expected_grad) < tolerance<TestType>());
  }
}

TEST_CASE("cross_entropy without smoothing ignores -inf log-probabilities of other classes") {
  const Tensor logp = Tensor::from_vector<double>({-INFINITY, 0.0}, {1, 2});
  Tensor loss = Tensor::empty({1}, {DType::kFloat64});
  cpu().cross_entropy(logp, Tensor::from_vector<int64_t>({1}), 0.0, loss);
  REQUIRE(loss.item() == 0.0);
}

TEST_CASE("cross_entropy names a target outside [0, C)") {
  const Tensor logp = Tensor::zeros({3, 4});
  Tensor loss = Tensor::empty({3});
  Tensor grad = Tensor::empty({3, 4});
  for (int64_t bad : {4, -1}) {
    const Tensor target = Tensor::from_vector<int64_t>({0, bad, 1});
    REQUIRE_THROWS_AS(cpu().cross_entropy(logp, target, 0.0, loss), std::out_of_range);
    REQUIRE_THROWS_WITH(cpu().cross_entropy(logp, target, 0.0, loss),
                        Catch::Contains("target " + std::to_string(bad)) &&
                            Catch::Contains("[0, 4)"));
    REQUIRE_THROWS_AS(
        cpu().cross_entropy_backward(logp, target, 0.0, Tensor::ones({3}), grad),
        std::out_of_range);
  }
}

// ---- batch norm ----

namespace {

struct BatchNormCase {
  int64_t n, c, l;
  bool affine;
};

/// Naive training forward in double: per-channel mean, biased variance, normalise, affine.
void naive_bn_train(const std::vector<double>& x, const std::vector<double>& gamma,
                    const std::vector<double>& beta, double eps, const BatchNormCase& s,
                    std::vector<double>& y, std::vector<double>& mean,
                    std::vector<double>& invstd) {
  const double m = static_cast<double>(s.n * s.l);
  y.assign(x.size(), 0.0);
  mean.assign(s.c, 0.0);
  invstd.assign(s.c, 0.0);
  for (int64_t ch = 0; ch < s.c; ++ch) {
    double sum = 0.0, sq = 0.0;
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.l; ++j) sum += x[(i * s.c + ch) * s.l + j];
    mean[ch] = sum / m;
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.l; ++j) sq += std::pow(x[(i * s.c + ch) * s.l + j] - mean[ch], 2);
    invstd[ch] = 1.0 / std::sqrt(sq / m + eps);
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.l; ++j) {
        const int64_t k = (i * s.c + ch) * s.l + j;
        y[k] = (x[k] - mean[ch]) * invstd[ch] * gamma[ch] + beta[ch];
      }
  }
}

Tensor maybe(bool affine, const std::vector<double>& v, int64_t c) {
  return affine ? tensor_of<double>(v, {c}) : Tensor();
}

}  // namespace

TEST_CASE("batch_norm_train and batch_norm_eval match naive loops (float64)") {
  const double eps = 1e-5;
  // L >= 8 runs the kernel's 8-way partial sums; N = 1 with L > 1 is a valid batch; the last
  // two are above the threshold where the channels are split between threads.
  for (const BatchNormCase& s :
       {BatchNormCase{8, 3, 1, true}, BatchNormCase{4, 5, 6, true}, BatchNormCase{6, 2, 3, false},
        BatchNormCase{4, 5, 19, true}, BatchNormCase{1, 3, 7, false},
        BatchNormCase{64, 600, 1, true}, BatchNormCase{8, 64, 80, true}}) {
    INFO("n=" << s.n << " c=" << s.c << " l=" << s.l << " affine=" << s.affine);
    const auto xv = random_values(s.n * s.c * s.l, 51, -2.0, 3.0);
    std::vector<double> gamma = random_values(s.c, 52, 0.5, 1.5), beta = random_values(s.c, 53);
    if (!s.affine) {
      gamma.assign(s.c, 1.0);
      beta.assign(s.c, 0.0);
    }
    const Tensor x = tensor_of<double>(xv, {s.n, s.c, s.l});
    Tensor y = Tensor::empty(x.shape(), {DType::kFloat64});
    Tensor mean = Tensor::empty({s.c}, {DType::kFloat64}), invstd = Tensor::empty({s.c}, {DType::kFloat64});
    Tensor var = Tensor::empty({s.c}, {DType::kFloat64});
    cpu().batch_norm_train(x, maybe(s.affine, gamma, s.c), maybe(s.affine, beta, s.c), eps, s.n,
                           s.c, s.l, y, mean, invstd, var);
    std::vector<double> ey, emean, einvstd;
    naive_bn_train(xv, gamma, beta, eps, s, ey, emean, einvstd);
    REQUIRE(max_rel_err(y.to_vector<double>(), ey) < 1e-12);
    REQUIRE(max_rel_err(mean.to_vector<double>(), emean) < 1e-12);
    REQUIRE(max_rel_err(invstd.to_vector<double>(), einvstd) < 1e-12);
    // var is the biased variance itself: invstd = 1/sqrt(var + eps).
    std::vector<double> evar;
    for (double is : einvstd) evar.push_back(1.0 / (is * is) - eps);
    REQUIRE(max_rel_err(var.to_vector<double>(), evar) < 1e-9);

    // Eval with running stats: y = (x - rm) / sqrt(rv + eps) * gamma + beta.
    const auto rm = random_values(s.c, 54), rv = random_values(s.c, 55, 0.5, 2.0);
    cpu().batch_norm_eval(x, maybe(s.affine, gamma, s.c), maybe(s.affine, beta, s.c),
                          tensor_of<double>(rm, {s.c}), tensor_of<double>(rv, {s.c}), eps, s.n,
                          s.c, s.l, y);
    std::vector<double> expected(xv.size());
    for (size_t k = 0; k < xv.size(); ++k) {
      const int64_t ch = (static_cast<int64_t>(k) / s.l) % s.c;
      expected[k] = (xv[k] - rm[ch]) / std::sqrt(rv[ch] + eps) * gamma[ch] + beta[ch];
    }
    REQUIRE(max_rel_err(y.to_vector<double>(), expected) < 1e-12);
  }
}

TEST_CASE("batch_norm float32 agrees with float64") {
  const BatchNormCase s{16, 4, 5, true};
  const auto xv = random_values(s.n * s.c * s.l, 56), gv = random_values(s.c, 57);
  auto run = [&](DType dt) {
    const Tensor x = tensor_of<double>(xv, {s.n, s.c, s.l}).to(dt);
    const Tensor gamma = tensor_of<double>(gv, {s.c}).to(dt);
    Tensor y = Tensor::empty(x.shape(), {dt}), mean = Tensor::empty({s.c}, {dt}),
           invstd = Tensor::empty({s.c}, {dt});
    Tensor no_var;
    cpu().batch_norm_train(x, gamma, Tensor(), 1e-5, s.n, s.c, s.l, y, mean, invstd, no_var);
    return y.to_vector<double>();
  };
  REQUIRE(max_rel_err(run(DType::kFloat32), run(DType::kFloat64)) < 1e-5);
}

TEST_CASE("batch_norm_backward matches finite differences of the training forward (float64)") {
  const double eps = 1e-5, h = 1e-6;
  for (const BatchNormCase& s : {BatchNormCase{5, 3, 1, true}, BatchNormCase{3, 2, 4, true},
                                 BatchNormCase{4, 2, 2, false}, BatchNormCase{2, 2, 11, true},
                                 BatchNormCase{1, 2, 5, true}}) {
    INFO("n=" << s.n << " c=" << s.c << " l=" << s.l << " affine=" << s.affine);
    const int64_t size = s.n * s.c * s.l;
    std::vector<double> xv = random_values(size, 61), gamma = random_values(s.c, 62, 0.5, 1.5),
                        beta = random_values(s.c, 63);
    const auto wv = random_values(size, 64);  // loss = Σ w * y, so grad_y = w
    if (!s.affine) {
      gamma.assign(s.c, 1.0);
      beta.assign(s.c, 0.0);
    }
    auto loss = [&](const std::vector<double>& x, const std::vector<double>& g,
                    const std::vector<double>& b) {
      std::vector<double> y, mean, invstd;
      naive_bn_train(x, g, b, eps, s, y, mean, invstd);
      double total = 0.0;
      for (int64_t k = 0; k < size; ++k) total += wv[k] * y[k];
      return total;
    };
    auto central = [&](std::vector<double>& v, size_t k, auto&& f) {
      const double saved = v[k];
      v[k] = saved + h;
      const double up = f();
      v[k] = saved - h;
      const double down = f();
      v[k] = saved;
      return (up - down) / (2 * h);
    };
    // Forward with the kernel for mean / invstd, then the backward kernel.
    const Tensor x = tensor_of<double>(xv, {s.n, s.c, s.l});
    const Tensor gamma_t = maybe(s.affine, gamma, s.c);
    Tensor y = Tensor::empty(x.shape(), {DType::kFloat64});
    Tensor mean = Tensor::empty({s.c}, {DType::kFloat64}), invstd = Tensor::empty({s.c}, {DType::kFloat64});
    Tensor no_var;
    cpu().batch_norm_train(x, gamma_t, maybe(s.affine, beta, s.c), eps, s.n, s.c, s.l, y, mean,
                           invstd, no_var);
    Tensor gx = Tensor::empty(x.shape(), {DType::kFloat64});
    Tensor gg = s.affine ? Tensor::empty({s.c}, {DType::kFloat64}) : Tensor();
    Tensor gb = s.affine ? Tensor::empty({s.c}, {DType::kFloat64}) : Tensor();
    cpu().batch_norm_backward(tensor_of<double>(wv, x.shape()), x, gamma_t, mean, invstd, s.n,
                              s.c, s.l, gx, gg, gb);
    std::vector<double> fd_x;
    for (int64_t k = 0; k < size; ++k) {
      fd_x.push_back(central(xv, k, [&] { return loss(xv, gamma, beta); }));
    }
    REQUIRE(max_rel_err(gx.to_vector<double>(), fd_x) < 1e-6);
    if (s.affine) {
      std::vector<double> fd_g, fd_b;
      for (int64_t ch = 0; ch < s.c; ++ch) {
        fd_g.push_back(central(gamma, ch, [&] { return loss(xv, gamma, beta); }));
        fd_b.push_back(central(beta, ch, [&] { return loss(xv, gamma, beta); }));
      }
      REQUIRE(max_rel_err(gg.to_vector<double>(), fd_g) < 1e-6);
      REQUIRE(max_rel_err(gb.to_vector<double>(), fd_b) < 1e-6);
    }
  }
}

TEST_CASE("batch_norm kernels give the same bits on 1 thread and on all threads") {
  // Large enough that parallel_for splits the channels. Only meaningful with >= 2 cores.
  if (hardware_threads() < 2) WARN("one core: the thread counts compared are equal");
  for (const BatchNormCase& s : {BatchNormCase{96, 512, 1, true}, BatchNormCase{6, 40, 300, true}}) {
    INFO("n=" << s.n << " c=" << s.c << " l=" << s.l);
    const Tensor x = random_tensor<float>({s.n, s.c, s.l}, 67, -2.0, 3.0);
    const Tensor g = random_tensor<float>({s.n, s.c, s.l}, 68);
    const Tensor gamma = random_tensor<float>({s.c}, 69, 0.5, 1.5);
    const Tensor beta = random_tensor<float>({s.c}, 70);
    auto run = [&](int threads) {
      ThreadBudgetGuard guard(threads);
      std::vector<Tensor> out = {Tensor::empty(x.shape()), Tensor::empty({s.c}),
                                 Tensor::empty({s.c}), Tensor::empty(x.shape()),
                                 Tensor::empty({s.c}), Tensor::empty({s.c})};
      Tensor no_var;
      cpu().batch_norm_train(x, gamma, beta, 1e-5, s.n, s.c, s.l, out[0], out[1], out[2], no_var);
      cpu().batch_norm_backward(g, x, gamma, out[1], out[2], s.n, s.c, s.l, out[3], out[4],
                                out[5]);
      return out;
    };
    const std::vector<Tensor> one = run(1), all = run(hardware_threads());
    for (size_t k = 0; k < one.size(); ++k) {
      INFO("output " << k);
      REQUIRE(ops::equal(one[k], all[k]));
    }
  }
}

TEST_CASE("batch_norm_backward float32 agrees with float64") {
  const BatchNormCase s{32, 48, 9, true};
  const auto xv = random_values(s.n * s.c * s.l, 71, -2.0, 3.0),
             gv = random_values(s.n * s.c * s.l, 72), gamma = random_values(s.c, 73, 0.5, 1.5);
  auto run = [&](DType dt) {
    const Tensor x = tensor_of<double>(xv, {s.n, s.c, s.l}).to(dt);
    const Tensor g = tensor_of<double>(gv, {s.n, s.c, s.l}).to(dt);
    const Tensor gm = tensor_of<double>(gamma, {s.c}).to(dt);
    Tensor y = Tensor::empty(x.shape(), {dt}), mean = Tensor::empty({s.c}, {dt}),
           invstd = Tensor::empty({s.c}, {dt}), gx = Tensor::empty(x.shape(), {dt}),
           gg = Tensor::empty({s.c}, {dt}), gb = Tensor::empty({s.c}, {dt});
    Tensor no_var;
    cpu().batch_norm_train(x, gm, Tensor(), 1e-5, s.n, s.c, s.l, y, mean, invstd, no_var);
    cpu().batch_norm_backward(g, x, gm, mean, invstd, s.n, s.c, s.l, gx, gg, gb);
    return std::vector<std::vector<double>>{values(gx), values(gg), values(gb)};
  };
  const auto f32 = run(DType::kFloat32), f64 = run(DType::kFloat64);
  REQUIRE(max_rel_err(f32[0], f64[0]) < 1e-4);
  REQUIRE(max_rel_err(f32[1], f64[1]) < 1e-4);
  REQUIRE(max_rel_err(f32[2], f64[2]) < 1e-4);
}

TEST_CASE("batch_norm_backward computes only the wanted gradients") {
  const Tensor x = random_tensor<double>({4, 3}, 65), g = random_tensor<double>({4, 3}, 66);
  const Tensor mean = Tensor::zeros({3}, {DType::kFloat64}), invstd = Tensor::ones({3}, {DType::kFloat64});
  Tensor gx = Tensor::empty({4, 3}, {DType::kFloat64}), none;
  Tensor gb = Tensor::empty({3}, {DType::kFloat64});
  cpu().batch_norm_backward(g, x, Tensor(), mean, invstd, 4, 3, 1, gx, none, gb);
  REQUIRE(max_rel_err(gb.to_vector<double>(), ops::sum(g, 0).to_vector<double>()) < 1e-12);
  Tensor gx2 = Tensor::empty({4, 3}, {DType::kFloat64});
  cpu().batch_norm_backward(g, x, Tensor(), mean, invstd, 4, 3, 1, gx2, none, none);
  REQUIRE(ops::equal(gx, gx2));
}

// ---- optimizers ----

TEMPLATE_TEST_CASE("sgd_step follows torch.optim.SGD", "[optim]", float, double) {
  struct Config {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const double lr = 0.1;
  for (Config cfg : {Config{0, 0, 0, false}, Config{0.9, 0, 0, false}, Config{0.9, 0.3, 0.01, false},
                     Config{0.8, 0, 0.05, true}}) {
    INFO("momentum=" << cfg.momentum << " dampening=" << cfg.dampening
                     << " wd=" << cfg.weight_decay << " nesterov=" << cfg.nesterov);
    const int64_t n = 7;
    std::vector<double> p = rounded<TestType>(random_values(n, 71)), buf(n, 0.0);
    Tensor param = tensor_of<TestType>(p, {n});
    Tensor buffer = Tensor::zeros({n}, {param.dtype()});
    for (int step = 0; step < 3; ++step) {
      const auto grad = rounded<TestType>(random_values(n, 72 + step));
      cpu().sgd_step(param, tensor_of<TestType>(grad, {n}), buffer, lr, cfg.momentum,
                     cfg.dampening, cfg.weight_decay, cfg.nesterov, step == 0);
      for (int64_t i = 0; i < n; ++i) {  // by hand, in double
        double g = grad[i] + cfg.weight_decay * p[i];
        if (cfg.momentum != 0) {
          buf[i] = step == 0 ? g : cfg.momentum * buf[i] + (1 - cfg.dampening) * g;
          g = cfg.nesterov ? g + cfg.momentum * buf[i] : buf[i];
        }
        p[i] -= lr * g;
      }
      REQUIRE(max_rel_err(param.template to_vector<double>(), p) < tolerance<TestType>());
      if (cfg.momentum != 0) {
        REQUIRE(max_rel_err(buffer.template to_vector<double>(), buf) < tolerance<TestType>());
      }
    }
  }
}

TEMPLATE_TEST_CASE("adam_step follows torch.optim.Adam and AdamW", "[optim]", float, double) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  for (bool decoupled : {false, true}) {
    for (double wd : {0.0, 0.1}) {
      INFO("decoupled=" << decoupled << " wd=" << wd);
      const int64_t n = 9;
      std::vector<double> p = rounded<TestType>(random_values(n, 81)), m(n, 0.0), v(n, 0.0);
      Tensor param = tensor_of<TestType>(p, {n});
      Tensor exp_avg = Tensor::zeros({n}, {param.dtype()});
      Tensor exp_avg_sq = Tensor::zeros({n}, {param.dtype()});
      for (int64_t t = 1; t <= 3; ++t) {
        const auto grad = rounded<TestType>(random_values(n, 82 + t));
        cpu().adam_step(param, tensor_of<TestType>(grad, {n}), exp_avg, exp_avg_sq, lr, b1, b2,
                        eps, wd, decoupled, t);
        for (int64_t i = 0; i < n; ++i) {  // by hand, in double
          double g = grad[i];
          if (decoupled) {
            p[i] *= 1 - lr * wd;
          } else {
            g += wd * p[i];
          }
          m[i] = b1 * m[i] + (1 - b1) * g;
          v[i] = b2 * v[i] + (1 - b2) * g * g;
          const double m_hat = m[i] / (1 - std::pow(b1, t)), v_hat = v[i] / (1 - std::pow(b2, t));
          p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
        }
        REQUIRE(max_rel_err(param.template to_vector<double>(), p) < tolerance<TestType>());
        REQUIRE(max_rel_err(exp_avg.template to_vector<double>(), m) < tolerance<TestType>());
        REQUIRE(max_rel_err(exp_avg_sq.template to_vector<double>(), v) < tolerance<TestType>());
      }
    }
  }
}

TEST_CASE("adam_step rejects step 0") {
  Tensor p = Tensor::zeros({2}), m = Tensor::zeros({2}), v = Tensor::zeros({2});
  REQUIRE_THROWS_WITH(cpu().adam_step(p, Tensor::zeros({2}), m, v, 0.1, 0.9, 0.999, 1e-8, 0, false, 0),
                      Catch::Contains("got 0"));
}

// ---- index_select ----

TEST_CASE("index_select picks rows of any dtype and names a bad index") {
  const Tensor src = Tensor::from_vector<int64_t>({0, 1, 10, 11, 20, 21}, {3, 2});
  const Tensor out = ops::index_select(src, Tensor::from_vector<int64_t>({2, 0, 2}));
  REQUIRE(out.shape() == Shape{3, 2});
  REQUIRE(out.to_vector<int64_t>() == std::vector<int64_t>{20, 21, 0, 1, 20, 21});
  const Tensor f = random_tensor<float>({50000, 3}, 91);
  const auto fv = f.to_vector<float>();
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 40000; ++i) idx.push_back((i * 7919) % 50000);
  const auto picked = ops::index_select(f, Tensor::from_vector(idx)).to_vector<float>();
  for (size_t i = 0; i < idx.size(); ++i) {
    for (int64_t j = 0; j < 3; ++j) REQUIRE(picked[i * 3 + j] == fv[idx[i] * 3 + j]);
  }
  REQUIRE(ops::index_select(src, Tensor::zeros({0}, {DType::kInt64})).shape() == Shape{0, 2});
  REQUIRE_THROWS_AS(ops::index_select(src, Tensor::from_vector<int64_t>({1, 3})),
                    std::out_of_range);
  REQUIRE_THROWS_WITH(ops::index_select(src, Tensor::from_vector<int64_t>({1, -1})),
                      Catch::Contains("index -1") && Catch::Contains("[0, 3)"));
  REQUIRE_THROWS_WITH(ops::index_select(src, Tensor::zeros({2})), Catch::Contains("float32"));
}
