// Learning-rate schedules (torch.optim.lr_scheduler): a scheduler sets its optimizer's lr as a
// function of the step count alone.
//
//   nn::AdamW opt(params, {.lr = 3e-4});
//   nn::WarmupCosineLR schedule(opt, /*warmup_steps=*/100, /*total_steps=*/5000);
//   for (...) { opt.zero_grad(); loss.backward(); opt.step(); schedule.step(); }
//
// As in torch: the constructor records the optimizer's lr as base_lr and sets lr_at(0), the
// learning rate of the first optimizer step; each step() advances last_step and sets
// lr_at(last_step). lr_at is a pure function of the step, so a resumed run calls
// set_last_step(steps done so far) (torch's last_epoch) and continues the same curve.
#pragma once

#include <cstdint>

#include "nn/optimizer.h"

namespace pipewright::nn {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// The learning rate of optimizer step `step` (0-based). Throws std::invalid_argument for
  /// step < 0.
  double lr_at(int64_t step) const;
  /// last_step += 1, then the optimizer's lr = lr_at(last_step).
  void step();
  /// last_step = step and the optimizer's lr = lr_at(step) (resuming). Throws
  /// std::invalid_argument for step < 0.
  void set_last_step(int64_t step);
  int64_t last_step() const { return last_step_; }
  /// The optimizer's lr at construction.
  double base_lr() const { return base_lr_; }
  /// The lr last set (torch's get_last_lr()).
  double last_lr() const { return optimizer_.lr(); }

 protected:
  /// Records optimizer.lr() as base_lr; the derived constructor ends with start().
  explicit LRScheduler(Optimizer& optimizer);
  /// Sets the optimizer's lr to lr_at(0).
  void start() { set_last_step(0); }
  /// lr_at for step >= 0.
  virtual double compute(int64_t step) const = 0;

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t last_step_ = 0;
};

/// Linear warmup, then cosine decay (Loshchilov & Hutter, "SGDR", without restarts; the
/// warmup of Goyal et al., 2017), as nanoGPT and GPT-3 train:
///   step < W:        base_lr · (step + 1) / W
///   W <= step < N:   min_lr + (base_lr - min_lr) · (1 + cos(π (step - W) / (N - W))) / 2
///   step >= N:       min_lr
/// with W = warmup_steps, N = total_steps. The same curve as torch's
/// SequentialLR([LinearLR(start_factor=1/W, total_iters=W-1), CosineAnnealingLR(T_max=N-W,
/// eta_min=min_lr)], milestones=[W]); W = 0 is CosineAnnealingLR(T_max=N) alone.
class WarmupCosineLR : public LRScheduler {
 public:
  /// Throws std::invalid_argument unless 0 <= warmup_steps <= total_steps, total_steps > 0 and
  /// 0 <= min_lr.
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                 double min_lr = 0.0);

 protected:
  double compute(int64_t step) const override;

 private:
  int64_t warmup_, total_;
  double min_lr_;
};

/// torch.optim.lr_scheduler.StepLR: base_lr · gamma^⌊step / step_size⌋.
class StepLR : public LRScheduler {
 public:
  /// Throws std::invalid_argument for step_size <= 0 or gamma < 0.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double compute(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// torch.optim.lr_scheduler.ConstantLR: base_lr · factor for step < total_iters, then base_lr
/// (torch's defaults factor 1/3, total_iters 5). factor 1 (or total_iters 0) keeps the lr
/// constant.
class ConstantLR : public LRScheduler {
 public:
  /// Throws std::invalid_argument unless 0 <= factor <= 1 and total_iters >= 0.
  explicit ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5);

 protected:
  double compute(int64_t step) const override;

 private:
  double factor_;
  int64_t total_iters_;
};

}  // namespace pipewright::nn
