// Dynamic loss scaling for float16 training: torch.amp.GradScaler's semantics.
//
// float16 holds magnitudes down to 2^-24 (2^-14 normal), so the small gradients of a float16
// step underflow to zero. Multiplying the loss by S before backward multiplies every gradient
// by S (exactly, S a power of two); dividing the float32 gradients by S before the optimizer
// steps undoes it. A gradient that overflowed (inf, or NaN from inf - inf) means S was too
// large: the step is skipped — no parameter and no optimizer state changes — and S halves.
// After growth_interval clean steps in a row S doubles (Micikevicius et al., "Mixed Precision
// Training", ICLR 2018, §3.2; torch.amp.GradScaler: init 2^16, growth 2, backoff 0.5,
// interval 2000).
//
//   nn::GradScaler scaler;
//   for (...) {
//     pipe.train_step(x, y, loss_fn, {.loss_scale = scaler.scale()});   // or (loss * S).backward()
//     pipe.unscale_grads(scaler);          // a plain model: scaler.unscale(model.parameters())
//     pipe.clip_grad_norm(1.0);            // clip the unscaled gradients
//     scaler.step(optimizer);              // skipped when a gradient overflowed
//     scaler.update();
//     optimizer.zero_grad();
//   }
// or, the same in one call (unscaled on the device, so a CUDA graph can hold it; pipe.h):
//   StepResult r = pipe.train_step(x, y, loss_fn, optimizer,
//                                  {.grad_scaler = &scaler, .max_grad_norm = 1.0});
//   (r.skipped: the step overflowed; nothing was updated and the scale backed off)
// In a pipeline the decision is one for the whole model: Pipe::unscale_grads combines every
// stage's and every process's finding before any optimizer steps (pipeline/pipe.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/optimizer.h"
#include "tensor/tensor.h"

namespace pipewright::nn {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
  bool enabled = true;             // false: scale() is 1 and nothing is ever skipped
};

class GradScaler {
 public:
  /// Throws std::invalid_argument naming the value when init_scale is not positive and
  /// finite, growth_factor <= 1, backoff_factor not in (0, 1) or growth_interval < 1.
  explicit GradScaler(GradScalerOptions options = {});

  /// The factor to multiply this step's loss by (1 when disabled).
  double scale() const { return options_.enabled ? scale_ : 1.0; }
  /// GradScalerOptions::enabled.
  bool enabled() const { return options_.enabled; }

  /// Divides each parameter's .grad by scale(), in place (float32 or float64 gradients), and
  /// finds whether any gradient is inf or NaN. `combine` merges this process's finding (1 or
  /// 0) with the other processes' (their maximum), so that every process decides alike; empty:
  /// this process decides alone. Returns the finding. Once per step: a second call before
  /// update() throws std::logic_error (torch's "unscale_() has already been called").
  bool unscale(const std::vector<Tensor>& params,
               const std::function<double(double)>& combine = {});

  /// Records the finding of an unscale done elsewhere (Pipe::train_step's whole step with
  /// StepOptions::grad_scaler divides the gradients on the device and reads the finding with
  /// the step's losses), as unscale() would have: update() then backs off or grows from it.
  /// Does nothing when disabled. Throws std::logic_error, as unscale() does, when this step
  /// was already unscaled.
  void set_found_inf(bool found_inf);

  /// optimizer.step() unless a gradient overflowed, after unscale(optimizer.params()) when
  /// this step has not been unscaled yet. Returns whether the optimizer stepped.
  bool step(Optimizer& optimizer);

  /// Ends the step: the scale times backoff_factor after an overflow (and the count of clean
  /// steps restarts), times growth_factor after growth_interval clean steps in a row.
  void update();

  /// Whether this step's unscale() found an inf or NaN (false before it).
  bool found_inf() const { return found_inf_; }
  /// Clean steps in a row since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

}  // namespace pipewright::nn
