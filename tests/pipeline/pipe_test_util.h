// Helpers shared by the Pipe tests (CPU and CUDA): identical models from a seed, random
// tensors, comparisons that name what differs, a layer that throws on cue, and skip layers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nn/sequential.h"
#include "nn/skip.h"
#include "pipeline/pipe.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline::testing {

/// Linear(4,8) ReLU Linear(8,8) Tanh Linear(8,3): five children, built from `seed`.
nn::Sequential small_mlp(uint64_t seed);

/// N(0, 1) values of `shape` (float32) from `seed`, on `device`.
Tensor randn(const Shape& shape, uint64_t seed, Device device = Device::cpu(0));

/// Devices cpu(first), cpu(first + 1), ...
std::vector<Device> cpus(int first, int count);

/// The registered schedule `name` as `pipe` builds it (its virtual stages and recompute) for a
/// batch of input's rows: pipe.schedule_for(m, name), to pass as StepOptions::schedule.
Schedule named_schedule(const Pipe& pipe, const Tensor& input, const std::string& name);

/// max |a - b| over elements (any devices); a and b must have the same shape.
double max_diff(const Tensor& a, const Tensor& b);

/// Max over parameters of |grad_a - grad_b| relative to max(1, |grad_b|_max). Both modules
/// must have the same parameter names; a parameter whose grad is undefined on either side
/// gives +inf (unless both are undefined).
double max_grad_diff(const nn::Module& a, const nn::Module& b);

/// The un-pipelined reference of the transparency tests: `model` on a copy of x0 that
/// requires grad, its output, the MSE loss against `target`, and the input gradient after
/// loss.backward() (the parameters' .grad accumulate in `model`).
struct PlainRun {
  Tensor out, loss, input_grad;
};
PlainRun plain_model_run(nn::Sequential& model, const Tensor& x0, const Tensor& target);

/// The largest |value| of `t`.
double max_abs(const Tensor& t);

/// The bytes of `t` (any device, any strides), to send as they are. To compare tensors, use
/// testing::bitwise_equal (tests/compare.h): its failure says where they differ.
std::string bytes_of(const Tensor& t);
/// A copy of each parameter's .grad on cpu:0 (undefined where undefined), named as in
/// named_parameters(): a snapshot to compare with testing::bitwise_equal later.
nn::NamedTensors grads_of(const nn::Module& module);
/// A copy of each buffer (BatchNorm running statistics) on cpu:0, named.
nn::NamedTensors buffers_of(const nn::Module& module);
/// A copy of each parameter on cpu:0, named.
nn::NamedTensors params_of(const nn::Module& module);

/// Aborts the whole test binary when it lives longer than `seconds`: a hang is a failure,
/// never a pass (the fault tests' limit is far above any case's run time; not a performance
/// bound). Prints "HANG: <what> did not finish within <seconds> s" first.
class Watchdog {
 public:
  Watchdog(std::string what, int seconds);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// Identity layer that throws std::domain_error(message) on the forward of its k-th call,
/// counted down from `countdown` = k (shared, so the test can re-arm it; any thread).
class ThrowInForward : public nn::Module {
 public:
  ThrowInForward(std::shared_ptr<std::atomic<int>> countdown, std::string message)
      : countdown_(std::move(countdown)), message_(std::move(message)) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override {
    if (countdown_->fetch_sub(1) == 1) throw std::domain_error(message_);
    return x;
  }
  std::string str() const override { return "ThrowInForward()"; }

 private:
  std::shared_ptr<std::atomic<int>> countdown_;
  std::string message_;
};

/// Identity whose backward throws std::overflow_error(message) on its k-th call (a node of
/// the autograd graph, so the throw happens in the middle of a B or I action), counted down
/// from `countdown` = k (shared; any thread). k <= 0: never.
class ThrowInBackward : public nn::Module {
 public:
  ThrowInBackward(std::shared_ptr<std::atomic<int>> countdown, std::string message)
      : countdown_(std::move(countdown)), message_(std::move(message)) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override;
  std::string str() const override { return "ThrowInBackward()"; }

 private:
  std::shared_ptr<std::atomic<int>> countdown_;
  std::string message_;
};

/// Identity in value whose output is on `device` (autograd::to: differentiable), wherever its
/// input was: a module that leaves its output on another device.
class MoveTo : public nn::Module {
 public:
  explicit MoveTo(Device device) : device_(device) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override;
  std::string str() const override { return "MoveTo(" + device_.str() + ")"; }

 private:
  Device device_;
};

/// The exception the fault hook throws: message "injected fault at worker W, action I".
struct InjectedFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};
std::string fault_message(int worker, int index);

/// Arms `pipe` (PipeTestAccess::set_fault_hook) to throw InjectedFault before action `index`
/// of worker `worker`; the returned flag is set when it fired.
std::shared_ptr<std::atomic<bool>> arm_fault(Pipe& pipe, int worker, int index);

/// Identity that stashes its input (or tanh of it) under `name`.
class Stash : public nn::Skippable {
 public:
  explicit Stash(std::string name, bool tanh = false)
      : Skippable({.stash = {name}}), name_(std::move(name)), tanh_(tanh) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& x) override;
  std::string str() const override { return "Stash(" + name_ + (tanh_ ? ", tanh" : "") + ")"; }

 private:
  std::string name_;
  bool tanh_;
};

/// y + popped (add) or y * popped (mul: the popped tensor is saved for the backward).
class Pop : public nn::Skippable {
 public:
  explicit Pop(std::string name, bool mul = false)
      : Skippable({.pop = {name}}), name_(std::move(name)), mul_(mul) {}
  using nn::Module::forward;
  Tensor forward(const Tensor& y) override;
  std::string str() const override { return "Pop(" + name_ + (mul_ ? ", mul" : "") + ")"; }

 private:
  std::string name_;
  bool mul_;
};

}  // namespace pipewright::pipeline::testing
