// Fused CUDA SGD and Adam steps against the CPU, over several steps and every option.
// Tolerances: float32 rtol 1e-5 / atol 1e-6 after 5 steps (nvcc fuses a*b+c into FMAs, the
// CPU compiler may not: an ulp per operation), float64 1e-13. Also under small launch caps
// (kSmallLaunchLimits), where 1,237 elements wrap the grid-stride loops.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "cuda_kernels/launch_limits.h"
#include "tensor/ops.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

constexpr int kSteps = 5;

/// kSteps of SGD with every option set on a param of `shape`, on both devices, compared.
void check_sgd(const Shape& shape) {
  struct Options {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Options options[] = {{0.0, 0.0, 0.0, false}, {0.9, 0.0, 1e-2, false},
                             {0.9, 0.1, 0.0, false}, {0.9, 0.0, 1e-4, true}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Options& o : options) {
      INFO(dtype_name(dtype) << " momentum " << o.momentum << " dampening " << o.dampening
                             << " wd " << o.weight_decay << " nesterov " << o.nesterov);
      Tensor p = random_tensor(shape, dtype, 71);
      Tensor buf = Tensor::zeros(p.shape(), {dtype, Device::cpu(0)});
      Tensor p_g = p.to(gpu()), buf_g = buf.to(gpu());
      for (int step = 0; step < kSteps; ++step) {
        const Tensor grad = random_tensor(p.shape(), dtype, 72 + step);
        cpu_kernels().sgd_step(p, grad, buf, 0.1, o.momentum, o.dampening, o.weight_decay,
                               o.nesterov, step == 0);
        gpu_kernels().sgd_step(p_g, grad.to(gpu()), buf_g, 0.1, o.momentum, o.dampening,
                               o.weight_decay, o.nesterov, step == 0);
      }
      check_close(p_g, p, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
      check_close(buf_g, buf, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
    }
  }
}

TEST_CASE("cuda sgd_step matches cpu", "[cuda][optim]") {
  if (!gpu_available_or_skip()) return;
  check_sgd({1000, 3});
}

/// kSteps of Adam and AdamW, with and without weight decay, on a param of `shape`, compared.
void check_adam(const Shape& shape) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (bool decoupled : {false, true}) {
      for (double wd : {0.0, 1e-2}) {
        INFO(dtype_name(dtype) << " decoupled " << decoupled << " wd " << wd);
        Tensor p = random_tensor(shape, dtype, 81);
        Tensor m = Tensor::zeros(p.shape(), {dtype, Device::cpu(0)});
        Tensor v = Tensor::zeros(p.shape(), {dtype, Device::cpu(0)});
        Tensor p_g = p.to(gpu()), m_g = m.to(gpu()), v_g = v.to(gpu());
        for (int step = 1; step <= kSteps; ++step) {
          const Tensor grad = random_tensor(p.shape(), dtype, 82 + step);
          cpu_kernels().adam_step(p, grad, m, v, 1e-3, 0.9, 0.999, 1e-8, wd, decoupled, step);
          gpu_kernels().adam_step(p_g, grad.to(gpu()), m_g, v_g, 1e-3, 0.9, 0.999, 1e-8, wd,
                                  decoupled, step);
        }
        check_close(p_g, p, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
        check_close(m_g, m, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
        check_close(v_g, v, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-7, 1e-15));
      }
    }
  }
}

TEST_CASE("cuda adam_step matches cpu (Adam and AdamW)", "[cuda][optim]") {
  if (!gpu_available_or_skip()) return;
  check_adam({777});
}

/// The step's values as adam_step_indirect reads them: lr, 1-b1^t, 1-b2^t, 1-lr*wd in `dtype`.
Tensor adam_step_values(double lr, int64_t t, double wd, DType dtype, Device device) {
  const double k = static_cast<double>(t);
  return Tensor::from_vector(std::vector<double>{lr, 1.0 - std::pow(0.9, k), 1.0 - std::pow(0.999, k),
                                      1.0 - lr * wd}, {4})
      .to(dtype)
      .to(device);
}

TEST_CASE("adam_step_indirect (values read when the kernel runs) equals adam_step bit for bit, "
          "on the cpu and on cuda",
          "[cuda][optim][graph]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (bool decoupled : {false, true}) {
      const double wd = 1e-2;
      INFO(dtype_name(dtype) << " decoupled " << decoupled);
      Tensor p = random_tensor({777}, dtype, 91);
      Tensor m = Tensor::zeros(p.shape(), {dtype, Device::cpu(0)});
      Tensor v = Tensor::zeros(p.shape(), {dtype, Device::cpu(0)});
      Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
      Tensor p_g = p.to(gpu()), m_g = m.to(gpu()), v_g = v.to(gpu());
      Tensor p2_g = p.to(gpu()), m2_g = m.to(gpu()), v2_g = v.to(gpu());
      for (int step = 1; step <= kSteps; ++step) {
        const double lr = 1e-3 * step;  // a schedule: the value changes every step
        const Tensor grad = random_tensor(p.shape(), dtype, 92 + step);
        const Tensor values = adam_step_values(lr, step, wd, dtype, Device::cpu(0));
        const Tensor values_g = values.to(gpu());
        cpu_kernels().adam_step(p, grad, m, v, lr, 0.9, 0.999, 1e-8, wd, decoupled, step);
        cpu_kernels().adam_step_indirect(p2, grad, m2, v2, values.raw_data(), nullptr, 0.9,
                                         0.999, 1e-8, wd, decoupled);
        gpu_kernels().adam_step(p_g, grad.to(gpu()), m_g, v_g, lr, 0.9, 0.999, 1e-8, wd,
                                decoupled, step);
        gpu_kernels().adam_step_indirect(p2_g, grad.to(gpu()), m2_g, v2_g, values_g.raw_data(),
                                         nullptr, 0.9, 0.999, 1e-8, wd, decoupled);
      }
      check_bitwise_equal(p2, p);
      check_bitwise_equal(m2, m);
      check_bitwise_equal(v2, v);
      check_bitwise_equal(p2_g, p_g);
      check_bitwise_equal(m2_g, m_g);
      check_bitwise_equal(v2_g, v_g);
      check_close(p2_g, p, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
    }
  }
}

TEST_CASE("sgd_step_indirect (lr read when the kernel runs, a gate) equals sgd_step after its "
          "first step, on the cpu and on cuda",
          "[cuda][optim][graph]") {
  if (!gpu_available_or_skip()) return;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (bool nesterov : {false, true}) {
      INFO(dtype_name(dtype) << " nesterov " << nesterov);
      Tensor p = random_tensor({777}, dtype, 95);
      Tensor buf = Tensor::zeros(p.shape(), {dtype, Device::cpu(0)});
      Tensor p2 = p.clone(), buf2 = buf.clone();
      Tensor p_g = p.to(gpu()), buf_g = buf.to(gpu());
      const Tensor open_gate = Tensor::zeros({1}, {DType::kFloat64, Device::cpu(0)});
      const Tensor shut_gate = Tensor::full({1}, std::nan(""), {DType::kFloat64, Device::cpu(0)});
      const Tensor open_g = open_gate.to(gpu()), shut_g = shut_gate.to(gpu());
      for (int step = 0; step < kSteps; ++step) {
        const double lr = 0.1 / (1 + step);
        const Tensor grad = random_tensor(p.shape(), dtype, 96 + step);
        cpu_kernels().sgd_step(p, grad, buf, lr, 0.9, 0.0, 1e-2, nesterov, step == 0);
        if (step == 0) {  // the first step makes the buffer: never replayed
          cpu_kernels().sgd_step(p2, grad, buf2, lr, 0.9, 0.0, 1e-2, nesterov, true);
          gpu_kernels().sgd_step(p_g, grad.to(gpu()), buf_g, lr, 0.9, 0.0, 1e-2, nesterov, true);
          continue;
        }
        const Tensor lr_value = Tensor::full({1}, lr, {dtype, Device::cpu(0)});
        cpu_kernels().sgd_step_indirect(p2, grad, buf2, lr_value.raw_data(), open_gate.raw_data(),
                                        0.9, 0.0, 1e-2, nesterov);
        const Tensor lr_g = lr_value.to(gpu());
        gpu_kernels().sgd_step_indirect(p_g, grad.to(gpu()), buf_g, lr_g.raw_data(),
                                        open_g.raw_data(), 0.9, 0.0, 1e-2, nesterov);
        // A shut gate (NaN: a failed step) writes nothing.
        cpu_kernels().sgd_step_indirect(p2, grad, buf2, lr_value.raw_data(), shut_gate.raw_data(),
                                        0.9, 0.0, 1e-2, nesterov);
        gpu_kernels().sgd_step_indirect(p_g, grad.to(gpu()), buf_g, lr_g.raw_data(),
                                        shut_g.raw_data(), 0.9, 0.0, 1e-2, nesterov);
      }
      check_bitwise_equal(p2, p);
      check_bitwise_equal(buf2, buf);
      check_close(p_g, p, tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
    }
  }
}

TEST_CASE("cuda sgd_step and adam_step match cpu past the grid (small launch caps)",
          "[cuda][optim][limits]") {
  if (!gpu_available_or_skip()) return;
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    check_sgd({1237});
    check_adam({1237});
  }
}

/// Parameters of many sizes (an empty one, one element, the block's size and either side of
/// it, several blocks), `count` in all, and their gradients and states (Adam's moments m and
/// v; SGD's momentum buffer m), on `device`.
struct ListCase {
  std::vector<Tensor> p, g, m, v;
};

ListCase list_case(int count, DType dtype, Device device, uint64_t seed) {
  const int64_t sizes[] = {0, 1, 255, 256, 257, 1000, 3001, 17};
  ListCase c;
  for (int k = 0; k < count; ++k) {
    const Shape shape{sizes[k % 8] + 3 * (k / 8)};
    c.p.push_back(random_tensor(shape, dtype, seed + 4 * k).to(device));
    c.g.push_back(random_tensor(shape, dtype, seed + 4 * k + 1).to(device));
    c.m.push_back(random_tensor(shape, dtype, seed + 4 * k + 2).to(device));
    c.v.push_back(ops::abs(random_tensor(shape, dtype, seed + 4 * k + 3)).to(device));
  }
  return c;
}

std::vector<AdamTensors> adam_list(const ListCase& c) {
  std::vector<AdamTensors> list;
  for (size_t k = 0; k < c.p.size(); ++k) list.push_back({c.p[k], c.g[k], c.m[k], c.v[k]});
  return list;
}

void check_lists_equal(const ListCase& a, const ListCase& b) {
  for (size_t k = 0; k < a.p.size(); ++k) {
    INFO("tensor " << k << " of " << a.p.size() << ", " << a.p[k].numel() << " elements");
    check_bitwise_equal(a.p[k], b.p[k]);
    check_bitwise_equal(a.m[k], b.m[k]);
    check_bitwise_equal(a.v[k], b.v[k]);
  }
}

// Note [Tensor lists] (cuda_kernels/optim.cu): 100 tensors take 3 lists of up to 48 (the
// launches are counted in step_api_count_test), each element updated as adam_step updates its
// tensor alone; under small launch caps the lists are cut by blocks too and each tensor's loop
// wraps. The CPU's list agrees within the tolerance of check_adam.
TEST_CASE("adam_step_multi equals adam_step per tensor bit for bit",
          "[cuda][optim]") {
  if (!gpu_available_or_skip()) return;
  const int count = 100;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (bool decoupled : {false, true}) {
      INFO(dtype_name(dtype) << " decoupled " << decoupled);
      ListCase listed = list_case(count, dtype, gpu(), 300);
      ListCase alone = list_case(count, dtype, gpu(), 300);
      ListCase on_cpu = list_case(count, dtype, Device::cpu(0), 300);
      gpu_kernels().adam_step_multi(adam_list(listed), 1e-3, 0.9, 0.999, 1e-8, 1e-2, decoupled,
                                    3, nullptr, nullptr);
      cpu_kernels().adam_step_multi(adam_list(on_cpu), 1e-3, 0.9, 0.999, 1e-8, 1e-2, decoupled,
                                    3, nullptr, nullptr);
      for (int k = 0; k < count; ++k) {
        gpu_kernels().adam_step(alone.p[k], alone.g[k], alone.m[k], alone.v[k], 1e-3, 0.9,
                                0.999, 1e-8, 1e-2, decoupled, 3);
      }
      check_lists_equal(listed, alone);
      for (int k = 0; k < count; ++k) {
        check_close(listed.p[k], on_cpu.p[k], tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
      }
    }
  }
  for (const cuda::LaunchLimits& limits : kSmallLaunchLimits) {
    cuda::ScopedLaunchLimits scoped(limits);
    INFO(describe(limits));
    ListCase listed = list_case(20, DType::kFloat32, gpu(), 400);
    ListCase alone = list_case(20, DType::kFloat32, gpu(), 400);
    gpu_kernels().adam_step_multi(adam_list(listed), 1e-3, 0.9, 0.999, 1e-8, 0.0, false, 1,
                                  nullptr, nullptr);
    for (int k = 0; k < 20; ++k) {
      gpu_kernels().adam_step(alone.p[k], alone.g[k], alone.m[k], alone.v[k], 1e-3, 0.9, 0.999,
                              1e-8, 0.0, false, 1);
    }
    check_lists_equal(listed, alone);
  }
}

std::vector<SgdTensors> sgd_list(const ListCase& c, bool momentum) {
  std::vector<SgdTensors> list;
  for (size_t k = 0; k < c.p.size(); ++k) {
    list.push_back({c.p[k], c.g[k], momentum ? c.m[k] : Tensor()});
  }
  return list;
}

// The same for SGD (its momentum buffer in the case's `m`): a first step (buffer = g), a later
// one, with and without momentum, Nesterov, and lr read from memory through a gate.
TEST_CASE("sgd_step_multi equals sgd_step per tensor bit for bit", "[cuda][optim]") {
  if (!gpu_available_or_skip()) return;
  const cuda::LaunchLimits defaults = cuda::launch_limits();
  for (const cuda::LaunchLimits& limits : {defaults, kSmallLaunchLimits[1]}) {
    cuda::ScopedLaunchLimits scoped(limits);
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (double momentum : {0.0, 0.9}) {
        const bool nesterov = momentum != 0.0;
        INFO(describe(limits) << ", " << dtype_name(dtype) << " momentum " << momentum);
        ListCase listed = list_case(70, dtype, gpu(), 1000);
        ListCase alone = list_case(70, dtype, gpu(), 1000);
        ListCase on_cpu = list_case(70, dtype, Device::cpu(0), 1000);
        const Tensor lr = Tensor::full({1}, 0.05, {dtype, gpu()});
        const Tensor open_gate = Tensor::zeros({1}, {DType::kFloat64, gpu()});
        const bool buffered = momentum != 0.0;
        // One eager step at lr 0.05 of the cpu's list and of each tensor alone on the gpu.
        auto step_references = [&](bool first) {
          cpu_kernels().sgd_step_multi(sgd_list(on_cpu, buffered), 0.05, momentum, 0.0, 1e-2,
                                       nesterov, first, nullptr, nullptr);
          for (SgdTensors t : sgd_list(alone, buffered)) {
            gpu_kernels().sgd_step(t.param, t.grad, t.momentum_buffer, 0.05, momentum, 0.0, 1e-2,
                                   nesterov, first);
          }
        };
        for (bool first : {true, false}) {
          gpu_kernels().sgd_step_multi(sgd_list(listed, buffered), 0.05, momentum, 0.0, 1e-2,
                                       nesterov, first, nullptr, nullptr);
          step_references(first);
        }
        gpu_kernels().sgd_step_multi(sgd_list(listed, buffered), 0.0, momentum, 0.0, 1e-2,
                                     nesterov, false, lr.raw_data(), open_gate.raw_data());
        step_references(false);
        check_lists_equal(listed, alone);
        for (size_t k = 0; k < 70; ++k) {
          check_close(listed.p[k], on_cpu.p[k], tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
          check_close(listed.m[k], on_cpu.m[k], tol(dtype, 1e-5, 1e-13), tol(dtype, 1e-6, 1e-14));
        }
      }
    }
  }
}

// adam_step_indirect's values per tensor: 4 at 4 × its position, here of different steps
// (parameters that parted after a graph was captured), each as adam_step at its own step.
TEST_CASE("adam_step_multi with values from memory equals adam_step per tensor at its own step; "
          "a shut gate writes nothing",
          "[cuda][optim][graph]") {
  if (!gpu_available_or_skip()) return;
  const double lr = 3e-3, wd = 1e-2;
  const int count = 60;
  std::vector<double> values;
  for (int k = 0; k < count; ++k) {
    const double t = 1 + k % 5;
    for (double v : {lr, 1.0 - std::pow(0.9, t), 1.0 - std::pow(0.999, t), 1.0 - lr * wd}) {
      values.push_back(v);
    }
  }
  const Tensor values_g = Tensor::from_vector(values, {static_cast<int64_t>(values.size())})
                             .to(DType::kFloat32)
                             .to(gpu());
  const Tensor open_gate = Tensor::zeros({1}, {DType::kFloat64, gpu()});
  const Tensor shut_gate = Tensor::full({1}, std::nan(""), {DType::kFloat64, gpu()});
  ListCase listed = list_case(count, DType::kFloat32, gpu(), 500);
  ListCase eager = list_case(count, DType::kFloat32, gpu(), 500);
  ListCase before = list_case(count, DType::kFloat32, gpu(), 500);
  gpu_kernels().adam_step_multi(adam_list(listed), 0.0, 0.9, 0.999, 1e-8, wd, true, 1,
                                values_g.raw_data(), shut_gate.raw_data());
  check_lists_equal(listed, before);
  gpu_kernels().adam_step_multi(adam_list(listed), 0.0, 0.9, 0.999, 1e-8, wd, true, 1,
                                values_g.raw_data(), open_gate.raw_data());
  for (int k = 0; k < count; ++k) {
    gpu_kernels().adam_step(eager.p[k], eager.g[k], eager.m[k], eager.v[k], lr, 0.9, 0.999, 1e-8,
                            wd, true, 1 + k % 5);
  }
  check_lists_equal(listed, eager);
  ListCase on_cpu = list_case(count, DType::kFloat32, Device::cpu(0), 500);
  const Tensor values_cpu = values_g.to(Device::cpu(0));
  cpu_kernels().adam_step_multi(adam_list(on_cpu), 0.0, 0.9, 0.999, 1e-8, wd, true, 1,
                                values_cpu.raw_data(), nullptr);
  for (int k = 0; k < count; ++k) {
    check_close(listed.p[k], on_cpu.p[k], 1e-5, 1e-6);
  }
}

// Checked before anything is launched: a tensor of another dtype, or a missing moment.
TEST_CASE("adam_step_multi refuses a list of two dtypes or a missing moment, naming the tensor",
          "[cuda][optim]") {
  if (!gpu_available_or_skip()) return;
  ListCase a = list_case(3, DType::kFloat32, gpu(), 600);
  const ListCase untouched = list_case(3, DType::kFloat32, gpu(), 600);
  ListCase b = list_case(3, DType::kFloat64, gpu(), 600);
  std::vector<AdamTensors> mixed = adam_list(a);
  mixed.push_back(adam_list(b)[1]);
  CHECK_THROWS_WITH(gpu_kernels().adam_step_multi(mixed, 1e-3, 0.9, 0.999, 1e-8, 0.0, false, 1,
                                                  nullptr, nullptr),
                    Catch::Contains("tensor 3's parameter") && Catch::Contains("float64"));
  std::vector<AdamTensors> missing = adam_list(a);
  missing[2].exp_avg_sq = Tensor();
  CHECK_THROWS_WITH(gpu_kernels().adam_step_multi(missing, 1e-3, 0.9, 0.999, 1e-8, 0.0, false, 1,
                                                  nullptr, nullptr),
                    Catch::Contains("tensor 2 has an undefined state"));
  check_lists_equal(a, untouched);  // nothing launched
}

TEST_CASE("cuda adam_step rejects step 0", "[cuda][optim]") {
  if (!gpu_available_or_skip()) return;
  Tensor p = Tensor::zeros({4}, {DType::kFloat32, gpu()});
  Tensor g = Tensor::zeros({4}, {DType::kFloat32, gpu()});
  Tensor m = Tensor::zeros({4}, {DType::kFloat32, gpu()});
  Tensor v = Tensor::zeros({4}, {DType::kFloat32, gpu()});
  CHECK_THROWS_AS(gpu_kernels().adam_step(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, false, 0),
                  std::invalid_argument);
}

}  // namespace
}  // namespace pipewright::testing
