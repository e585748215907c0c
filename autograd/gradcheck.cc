// gradcheck (see gradcheck.h).
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

void check_input(const Tensor& t, size_t i) {
  if (t.dtype() != DType::kFloat64 || !t.device().is_cpu() || !t.is_contiguous() ||
      t.grad_fn() != nullptr) {
    throw std::invalid_argument("gradcheck: input " + std::to_string(i) + " (shape " +
                                t.shape().str() + ", " + dtype_name(t.dtype()) + ", " +
                                t.device().str() +
                                ") must be a contiguous float64 CPU leaf");
  }
}

/// L = Σ w ⊙ fn(inputs), without recording.
double weighted_output(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const Tensor& w) {
  NoGradGuard no_grad;
  return ops::sum(ops::mul(fn(inputs), w)).item();
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  std::vector<Tensor> checked;
  std::vector<size_t> positions;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    check_input(inputs[i], i);
    checked.push_back(inputs[i]);
    positions.push_back(i);
  }

  Tensor y = fn(inputs);
  if (y.dtype() != DType::kFloat64 || !y.requires_grad()) {
    throw std::invalid_argument(std::string("gradcheck: the output must be float64 and require "
                                            "grad, got ") + dtype_name(y.dtype()) +
                                (y.requires_grad() ? "" : " not requiring grad"));
  }
  Tensor w = Tensor::empty(y.shape(), {.dtype = DType::kFloat64, .device = y.device()});
  Generator generator(options.seed);
  generator.uniform_(w, -1.0, 1.0);
  std::vector<Tensor> analytical = backward({y}, {w}, checked);

  GradcheckResult result;
  for (size_t j = 0; j < checked.size(); ++j) {
    double* data = checked[j].data<double>();
    std::vector<double> grad = analytical[j].defined()
                                   ? analytical[j].to_vector<double>()
                                   : std::vector<double>(static_cast<size_t>(checked[j].numel()));
    for (int64_t k = 0; k < checked[j].numel(); ++k) {
      const double original = data[k];
      data[k] = original + options.eps;
      const double plus = weighted_output(fn, inputs, w);
      data[k] = original - options.eps;
      const double minus = weighted_output(fn, inputs, w);
      data[k] = original;
      const double numerical = (plus - minus) / (2.0 * options.eps);
      const double error = std::abs(grad[static_cast<size_t>(k)] - numerical);
      result.max_error = std::max(result.max_error, error);
      ++result.checked;
      if (result.ok && !(error <= options.atol + options.rtol * std::abs(numerical))) {
        std::ostringstream os;
        os << "input " << positions[j] << " (shape " << checked[j].shape().str() << ") element "
           << k << ": analytical " << grad[static_cast<size_t>(k)] << " vs numerical "
           << numerical << " (error " << error << ")";
        result.ok = false;
        result.message = os.str();
      }
    }
  }
  return result;
}

}  // namespace pipewright::autograd
