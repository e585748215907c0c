// Learning-rate schedulers (see lr_scheduler.h).
#include "nn/lr_scheduler.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace pipewright::nn {
namespace {

template <class... Args>
[[noreturn]] void fail(const char* scheduler, const Args&... args) {
  std::ostringstream os;
  os << scheduler << ": ";
  (os << ... << args);
  throw std::invalid_argument(os.str());
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

double LRScheduler::lr_at(int64_t step) const {
  if (step < 0) fail("LRScheduler", "step must be >= 0, got ", step);
  return compute(step);
}

void LRScheduler::step() { set_last_step(last_step_ + 1); }

void LRScheduler::set_last_step(int64_t step) {
  const double lr = lr_at(step);
  optimizer_.set_lr(lr);
  last_step_ = step;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                               double min_lr)
    : LRScheduler(optimizer), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  if (warmup_steps < 0 || total_steps <= 0 || warmup_steps > total_steps || !(min_lr >= 0)) {
    fail("WarmupCosineLR", "expected 0 <= warmup_steps <= total_steps, total_steps > 0 and "
         "min_lr >= 0, got warmup_steps ", warmup_steps, ", total_steps ", total_steps,
         ", min_lr ", min_lr);
  }
  start();
}

double WarmupCosineLR::compute(int64_t step) const {
  if (step < warmup_) {
    return base_lr() * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  }
  if (step >= total_) return min_lr_;
  const double progress =
      static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_lr_ + (base_lr() - min_lr_) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0 || !(gamma >= 0)) {
    fail("StepLR", "expected step_size > 0 and gamma >= 0, got step_size ", step_size,
         ", gamma ", gamma);
  }
  start();
}

double StepLR::compute(int64_t step) const {
  return base_lr() * std::pow(gamma_, static_cast<double>(step / step_size_));
}

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  if (!(factor >= 0 && factor <= 1) || total_iters < 0) {
    fail("ConstantLR", "expected 0 <= factor <= 1 and total_iters >= 0, got factor ", factor,
         ", total_iters ", total_iters);
  }
  start();
}

double ConstantLR::compute(int64_t step) const {
  return step < total_iters_ ? base_lr() * factor_ : base_lr();
}

}  // namespace pipewright::nn
