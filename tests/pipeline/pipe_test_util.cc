#include "tests/pipeline/pipe_test_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "autograd/function_node.h"
#include "autograd/functions.h"
#include "autograd/node.h"
#include "autograd/shape_ops.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe_test_access.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pipewright::pipeline::testing {

nn::Sequential small_mlp(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 8), nn::Tanh(),
                        nn::Linear(8, 3));
}

Tensor randn(const Shape& shape, uint64_t seed, Device device) {
  Tensor t = Tensor::empty(shape, {.device = device});
  Generator g(seed);
  g.normal_(t);
  return t;
}

Schedule named_schedule(const Pipe& pipe, const Tensor& input, const std::string& name) {
  return pipe.schedule_for(pipe.num_microbatches(input.size(0)), name);
}

std::vector<Device> cpus(int first, int count) {
  std::vector<Device> out;
  for (int i = 0; i < count; ++i) out.push_back(Device::cpu(first + i));
  return out;
}

double max_diff(const Tensor& a, const Tensor& b) { return ops::max_abs_diff(a, b); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

double max_grad_diff(const nn::Module& a, const nn::Module& b) {
  const nn::NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  if (pa.size() != pb.size()) throw std::invalid_argument("modules differ in parameters");
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const Tensor ga = pa[i].second.grad(), gb = pb[i].second.grad();
    if (!ga.defined() && !gb.defined()) continue;
    if (!ga.defined() || !gb.defined()) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, max_diff(ga, gb) / std::max(1.0, max_abs(gb)));
  }
  return worst;
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu(0)).contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

namespace {

// `t` copied to cpu:0 (a clone even when already there); undefined stays undefined.
Tensor host_copy(const Tensor& t) { return t.defined() ? t.to(Device::cpu(0)).clone() : Tensor(); }

}  // namespace

nn::NamedTensors grads_of(const nn::Module& module) {
  nn::NamedTensors out;
  for (const auto& [name, p] : module.named_parameters()) {
    out.emplace_back(name, host_copy(p.grad()));
  }
  return out;
}

nn::NamedTensors buffers_of(const nn::Module& module) {
  nn::NamedTensors out;
  for (const auto& [name, t] : module.named_buffers()) out.emplace_back(name, host_copy(t));
  return out;
}

nn::NamedTensors params_of(const nn::Module& module) {
  nn::NamedTensors out;
  for (const auto& [name, p] : module.named_parameters()) out.emplace_back(name, host_copy(p));
  return out;
}

Watchdog::Watchdog(std::string what, int seconds) : what_(std::move(what)) {
  thread_ = std::thread([this, seconds] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
      std::fprintf(stderr, "HANG: %s did not finish within %d s\n", what_.c_str(), seconds);
      std::abort();
    }
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

PlainRun plain_model_run(nn::Sequential& model, const Tensor& x0, const Tensor& target) {
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor out = model.forward(x);
  Tensor loss = nn::mse_loss(out, target);
  loss.backward();
  return {out, loss, x.grad()};
}

namespace {

// y = x, recorded with a node whose backward throws on the countdown's k-th call.
class ThrowingNode : public autograd::Node {
 public:
  ThrowingNode(std::shared_ptr<std::atomic<int>> countdown, std::string message)
      : countdown_(std::move(countdown)), message_(std::move(message)) {}
  const char* name() const override { return "ThrowingNodeBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads,
                            const std::vector<bool>&) override {
    if (countdown_->fetch_sub(1) == 1) throw std::overflow_error(message_);
    return {grads.at(0)};
  }
  void release_saved() override { mark_released(); }

 private:
  std::shared_ptr<std::atomic<int>> countdown_;
  std::string message_;
};

}  // namespace

Tensor ThrowInBackward::forward(const Tensor& x) {
  Tensor y = x.detach();
  if (autograd::should_record({x})) {
    autograd::NodeRecorder::record(std::make_shared<ThrowingNode>(countdown_, message_), {x},
                                   {&y});
  }
  return y;
}

Tensor MoveTo::forward(const Tensor& x) { return autograd::to(x, device_); }

std::string fault_message(int worker, int index) {
  return "injected fault at worker " + std::to_string(worker) + ", action " +
         std::to_string(index);
}

std::shared_ptr<std::atomic<bool>> arm_fault(Pipe& pipe, int worker, int index) {
  auto fired = std::make_shared<std::atomic<bool>>(false);
  PipeTestAccess::set_fault_hook(pipe, [worker, index, fired](int w, int i, const Action&) {
    if (w == worker && i == index) {
      fired->store(true);
      throw InjectedFault(fault_message(worker, index));
    }
  });
  return fired;
}

Tensor Stash::forward(const Tensor& x) {
  stash(name_, tanh_ ? autograd::tanh(x) : x);
  return x;
}

Tensor Pop::forward(const Tensor& y) {
  const Tensor s = pop(name_);
  return mul_ ? autograd::mul(y, s) : autograd::add(y, s);
}

}  // namespace pipewright::pipeline::testing
