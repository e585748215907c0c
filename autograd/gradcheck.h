// gradcheck: compares backward() with central finite differences, in float64.
//
// For f(inputs) -> y and a fixed random weight w of y's shape, the scalar L = Σ w ⊙ y has
//   analytical dL/dx  = backward(y, grad_output = w)  (one vector-Jacobian product), and
//   numerical  dL/dx_k ≈ (L(x + ε e_k) - L(x - ε e_k)) / 2ε   for every element k,
// for every input that requires grad. A random w checks every output element's contribution
// at the cost of one backward (torch.autograd.gradcheck's "fast mode" idea); the error of the
// central difference is O(ε²) plus rounding O(1e-16/ε), so float64 with ε = 1e-6 leaves about
// 1e-9 of slack for well-conditioned ops. Inputs are perturbed in place, so `fn` must read the
// very tensors it is given (a module's own parameters qualify: pass them as inputs too).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-8;  // pass when |analytical - numerical| <= atol + rtol·|numerical|
  double rtol = 1e-6;
  uint64_t seed = 0;   // of the random output weight w
};

struct GradcheckResult {
  bool ok = true;
  std::string message;     // the first mismatch, "input 1 [3]: analytical ... numerical ..."
  double max_error = 0.0;  // max |analytical - numerical| over all checked elements
  size_t checked = 0;      // number of input elements checked
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Checks fn's gradient with respect to every input that requires grad. Those inputs must be
/// contiguous float64 CPU leaves, else std::invalid_argument naming the input; fn's output
/// must be float64 and require grad, else std::invalid_argument. Inputs are restored after.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace pipewright::autograd
