// The thread-local precision policy (see precision.h).
#include "autograd/precision.h"

#include <stdexcept>

#include "autograd/function_node.h"

namespace pipewright::autograd {
namespace {

thread_local Precision t_precision = Precision::kFloat32;
thread_local WorkingCopies* t_copies = nullptr;

/// t's values rounded to `dtype` (16-bit), in t's dtype.
Tensor rounded(const Tensor& t, DType dtype) { return t.to(dtype).to(t.dtype()); }

/// y = round(x) with dx = round(dy): the value and its gradient both 16-bit values.
class RoundToPrecisionBackward final : public FunctionNode {
 public:
  explicit RoundToPrecisionBackward(DType dtype) : dtype_(dtype) {}
  const char* name() const override { return "RoundToPrecisionBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads,
                               const std::vector<bool>& /*wanted*/) override {
    return {rounded(grads[0], dtype_)};
  }

 private:
  DType dtype_;
};

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBFloat16: return "bf16";
    case Precision::kFloat16: return "fp16";
    default: return "fp32";
  }
}

Precision precision_from_name(const std::string& name) {
  if (name == "fp32" || name == "float32") return Precision::kFloat32;
  if (name == "bf16" || name == "bfloat16") return Precision::kBFloat16;
  if (name == "fp16" || name == "float16") return Precision::kFloat16;
  throw std::invalid_argument("precision: expected fp32, bf16 or fp16 (or float32, bfloat16, "
                              "float16), got '" + name + "'");
}

DType precision_dtype(Precision p) {
  switch (p) {
    case Precision::kBFloat16: return DType::kBFloat16;
    case Precision::kFloat16: return DType::kFloat16;
    default: return DType::kFloat32;
  }
}

const Tensor& WorkingCopies::get(const Tensor& param, DType dtype) {
  auto [it, inserted] = copies_.try_emplace({param.impl(), dtype});
  if (inserted) it->second = {param, param.to(dtype)};
  return it->second.second;
}

int64_t WorkingCopies::bytes() const {
  int64_t total = 0;
  for (const auto& entry : copies_) {
    const Tensor& copy = entry.second.second;
    total += copy.numel() * static_cast<int64_t>(element_size(copy.dtype()));
  }
  return total;
}

Precision current_precision() { return t_precision; }

PrecisionScope::PrecisionScope(Precision precision, WorkingCopies* copies)
    : previous_precision_(t_precision), previous_copies_(t_copies) {
  t_precision = precision;
  t_copies = copies != nullptr ? copies : &own_;
}

PrecisionScope::~PrecisionScope() {
  t_precision = previous_precision_;
  t_copies = previous_copies_;
}

Tensor product_operand(const Tensor& t) {
  if (t_precision == Precision::kFloat32 || t.dtype() != DType::kFloat32) return t;
  return t.to(precision_dtype(t_precision));
}

Tensor weight_operand(const Tensor& weight) {
  if (t_precision == Precision::kFloat32 || weight.dtype() != DType::kFloat32) return weight;
  if (weight.grad_fn() != nullptr) return product_operand(weight);
  return t_copies->get(weight, precision_dtype(t_precision));
}

Tensor round_to_precision(const Tensor& t) {
  if (t_precision == Precision::kFloat32 || !t.defined() || t.dtype() != DType::kFloat32) {
    return t;
  }
  const DType dtype = precision_dtype(t_precision);
  Tensor y = rounded(t, dtype);
  record_op({t}, {&y}, [&] { return std::make_shared<RoundToPrecisionBackward>(dtype); });
  return y;
}

}  // namespace pipewright::autograd
