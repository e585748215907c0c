// Argument checks in the user's words, for layers and losses: a dtype or device mismatch
// names the layer or loss, both tensors (shape, dtype, device) and the fix (`.to(...)`),
// where the op underneath would only say "sub: operands differ".
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace pipewright {

/// Throws std::invalid_argument unless `t` has `dtype` and lives on `device`, which `other`
/// (named `other_name`) requires; `rule` may say how (", which take int64 class indices on
/// their device"):
///   "mse_loss: the target ([8, 1] int64 on cpu:0) does not match the input ([8, 1] float32
///    on cpu:2): the dtypes and devices differ. Convert the target first:
///    target.to(DType::kFloat32).to(Device::cpu(2))"
/// Throws std::logic_error (Tensor's) when `t` or `other` is undefined.
void check_operand(const std::string& where, const std::string& name, const Tensor& t,
                   DType dtype, Device device, const std::string& other_name,
                   const Tensor& other, const std::string& rule = "");

/// check_operand for `t` of `other`'s dtype and device:
/// check_like("Linear(...)", "input", x, "weight", weight).
void check_like(const std::string& where, const std::string& name, const Tensor& t,
                const std::string& other_name, const Tensor& other);

}  // namespace pipewright
