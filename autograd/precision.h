// Mixed precision: which dtype the matrix products compute in, as a per-thread policy.
//
// Note [The precision policy]
// Under Precision::kBFloat16 or kFloat16 (a PrecisionScope on this thread):
//   - matrix products (linear, matmul, batched_matmul: every Linear layer and attention's two
//     products) take their operands in the 16-bit dtype and accumulate in float32: activations
//     and output gradients are rounded (to nearest even) each time, parameters through a
//     working copy made once per scope (working_copy); the product is float32, as cuBLAS's
//     GemmEx with CUBLAS_COMPUTE_32F and a float32 C returns it (tensor/ops.h, matmul). PyTorch
//     autocast's "lower precision" op list is the reference (torch.amp docs, "CUDA Ops that
//     can autocast to float16"); unlike autocast the product stays float32 instead of being
//     rounded to 16 bits, one rounding fewer;
//   - the weight gradient of a product is accumulated into the float32 parameter's .grad in
//     float32 (the GEMM adds into it, beta = 1), never rounded to 16 bits: Megatron-LM's
//     "gradient accumulation fusion" into fp32 main_grad. Parameters stay float32 (master
//     weights) and the optimizer steps them in float32 (Micikevicius et al., "Mixed Precision
//     Training", ICLR 2018);
//   - each layer of a Sequential hands on its output rounded to the 16-bit dtype's values
//     (kept in float32 storage), and the gradient of that output is rounded the same way
//     (round_to_precision): the activations between layers are 16-bit values, as in
//     Megatron-LM's bf16 training (its residual stream in bf16 unless
//     --fp32-residual-connection). A pipeline's stage boundaries fall between layers, so the
//     values crossing stages are 16-bit values wherever the model is cut, and a pipelined step
//     computes what the un-pipelined model computes under the same policy;
//   - everything else — LayerNorm and BatchNorm statistics, softmax, GELU, the losses,
//     reductions, the optimizer — runs in float32 on those values: autocast's "float32" list,
//     and for elementwise ops more precision than autocast's 16-bit ones.
// float16's range is narrow (largest 65504, smallest normal 2^-14): gradients can underflow
// without loss scaling.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "autograd/precision_kind.h"
#include "tensor/tensor.h"

namespace pipewright::autograd {

/// "fp32", "bf16", "fp16" (the spelling of the examples' --precision flag).
const char* precision_name(Precision p);
/// Inverse of precision_name; also accepts "float32", "bfloat16", "float16". Throws
/// std::invalid_argument naming the string and the accepted names.
Precision precision_from_name(const std::string& name);
/// The operands' dtype: kFloat32, kBFloat16 or kFloat16.
DType precision_dtype(Precision p);

/// The 16-bit working copies of parameters made under one PrecisionScope (or, in a Pipe, one
/// step of one stage), keyed by the parameter. Not thread-safe: one thread uses it at a time.
class WorkingCopies {
 public:
  /// `param` converted to `dtype`, converted once and then reused. A parameter changed after
  /// its copy was made keeps the stale copy: clear() (or a new scope) between updates.
  const Tensor& get(const Tensor& param, DType dtype);
  void clear() { copies_.clear(); }
  /// Bytes held by the copies (what the policy adds to a stage's memory).
  int64_t bytes() const;

 private:
  // The handle keeps the parameter alive, so its impl pointer is not reused while cached.
  std::map<std::pair<const TensorImpl*, DType>, std::pair<Tensor, Tensor>> copies_;
};

/// The policy on this thread: kFloat32 unless a PrecisionScope is open.
Precision current_precision();

/// Sets this thread's precision for its lifetime (nests; restores the previous on exit), with
/// the working copies it makes kept in `copies` when given (a Pipe keeps one per stage and
/// step) or in the scope itself. Open it around forward and backward, not around an
/// optimizer's step: as with torch.autocast's weight cache, a parameter updated inside the
/// scope would keep its old working copy.
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision precision, WorkingCopies* copies = nullptr);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  WorkingCopies own_;
  Precision previous_precision_;
  WorkingCopies* previous_copies_;
};

/// A matrix product's operand under the current policy: `t` itself under kFloat32 or when it
/// is not float32, else t converted to the 16-bit dtype. Not recorded: the products record
/// their own nodes, with gradients to the float32 tensors.
Tensor product_operand(const Tensor& t);

/// product_operand for a layer's weight: a leaf (no grad_fn) is converted once per scope and
/// then taken from the scope's WorkingCopies; any other tensor as product_operand.
Tensor weight_operand(const Tensor& weight);

/// Under kBFloat16 / kFloat16: t's values rounded to the 16-bit dtype (nearest even, NaN kept)
/// in t's dtype and storage, recorded so that the gradient is rounded the same way; t itself
/// under kFloat32 or when t is not float32. Sequential::forward applies it to every layer's
/// output (Note [The precision policy]).
Tensor round_to_precision(const Tensor& t);

}  // namespace pipewright::autograd
