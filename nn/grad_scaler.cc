// GradScaler (see grad_scaler.h).
#include "nn/grad_scaler.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include "nn/clip_grad.h"
#include "tensor/ops.h"

namespace pipewright::nn {
namespace {

[[noreturn]] void bad(const char* name, double value, const char* rule) {
  std::ostringstream os;
  os << "GradScaler: " << name << " = " << value << " " << rule;
  throw std::invalid_argument(os.str());
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || std::isinf(options.init_scale)) {
    bad("init_scale", options.init_scale, "must be positive and finite");
  }
  if (!(options.growth_factor > 1)) bad("growth_factor", options.growth_factor, "must be > 1");
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1)) {
    bad("backoff_factor", options.backoff_factor, "must be in (0, 1)");
  }
  if (options.growth_interval < 1) {
    bad("growth_interval", static_cast<double>(options.growth_interval), "must be >= 1");
  }
}

namespace {
void check_not_unscaled(bool unscaled, const char* what) {
  if (unscaled) {
    throw std::logic_error(std::string("GradScaler::") + what + ": this step was already "
                           "unscaled since the last update(); unscale once per step");
  }
}
}  // namespace

bool GradScaler::unscale(const std::vector<Tensor>& params,
                         const std::function<double(double)>& combine) {
  if (!options_.enabled) return false;
  check_not_unscaled(unscaled_, "unscale");
  const double inverse = 1.0 / scale_;
  for (const Tensor& p : params) {
    Tensor g = p.defined() ? p.grad() : Tensor();
    if (!g.defined()) continue;
    if (g.is_contiguous()) {
      ops::mul_(g, inverse);
    } else {
      Tensor(p).set_grad(ops::mul(g, inverse));
    }
  }
  // Σ|g| over every gradient (nn/clip_grad.h): a sum propagates NaN and inf, where the max
  // reduction's comparisons may pass over a NaN. (A finite sum overflowing would mean
  // gradients near float32's limit: counted as an overflow, which skipping handles.)
  const double l1 = grad_norm_share(params, 1.0);
  double found = std::isfinite(l1) ? 0.0 : 1.0;
  if (combine) found = combine(found);
  unscaled_ = true;
  found_inf_ = found != 0.0;
  return found_inf_;
}

void GradScaler::set_found_inf(bool found_inf) {
  if (!options_.enabled) return;
  check_not_unscaled(unscaled_, "set_found_inf");
  unscaled_ = true;
  found_inf_ = found_inf;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (!unscaled_) unscale(optimizer.params());
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (!unscaled_) {
    throw std::logic_error("GradScaler::update: no unscale() or step() this step, so there is "
                           "no finding to update the scale from");
  }
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

}  // namespace pipewright::nn
