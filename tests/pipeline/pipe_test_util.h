// Helpers shared by the Pipe tests: identical models from a seed, random tensors, and
// comparisons that name what differs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/sequential.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline::testing {

/// Linear(4,8) ReLU Linear(8,8) Tanh Linear(8,3): five children, built from `seed`.
nn::Sequential small_mlp(uint64_t seed);

/// N(0, 1) values of `shape` (float32) from `seed`, on `device`.
Tensor randn(const Shape& shape, uint64_t seed, Device device = Device::cpu(0));

/// Devices cpu(first), cpu(first + 1), ...
std::vector<Device> cpus(int first, int count);

/// max |a - b| over elements (any devices); a and b must have the same shape.
double max_diff(const Tensor& a, const Tensor& b);

/// Max over parameters of |grad_a - grad_b| relative to max(1, |grad_b|_max). Both modules
/// must have the same parameter names; a parameter whose grad is undefined on either side
/// gives +inf (unless both are undefined).
double max_grad_diff(const nn::Module& a, const nn::Module& b);

/// The largest |value| of `t`.
double max_abs(const Tensor& t);

}  // namespace pipewright::pipeline::testing
