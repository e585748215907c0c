// The kernel table: one struct of function pointers per device type.
//
// tensor/ops.cc validates arguments (shapes, dtypes, devices), makes inputs contiguous,
// allocates outputs, then calls the kernel of the inputs' device type through kernels_for().
// So every kernel may assume: all tensors contiguous, on one device, shapes already checked,
// outputs allocated, floating dtype float32 or float64 unless stated. CPU kernels live in
// tensor/cpu/ (Eigen); CUDA kernels in cuda_kernels/, registered at start-up. A null entry
// means "not implemented for this device": kernels_for(...).get(&Kernels::x, "x", device)
// throws std::runtime_error "op x has no kernel for cuda:0".
//
// Adding an op: one pointer here, its CPU kernel, its CUDA kernel, its wrapper in ops.h.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "tensor/tensor.h"

namespace pipewright {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kRSub, kRDiv };  // R: b op a
enum class UnaryOp : uint8_t { kNeg, kExp, kLog, kSqrt, kRelu, kSquare, kAbs, kTanh, kSigmoid };
enum class ReduceOp : uint8_t { kSum, kMean, kMax };

struct Kernels {
  /// out[i] = value.
  void (*fill)(Tensor& out, double value) = nullptr;
  /// dst (contiguous) = src (any strides, same shape and dtype, same device).
  void (*copy_strided)(const Tensor& src, Tensor& dst) = nullptr;
  /// dst = src converted (same shape, same device, dtypes differ).
  void (*cast)(const Tensor& src, Tensor& dst) = nullptr;
  /// out = a op b. b.numel() == a.numel(), or b.numel() == 1, or b's shape equals the trailing
  /// dims of a (b repeats with period b.numel()). out has a's shape.
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = nullptr;
  /// out = a op s.
  void (*binary_scalar)(BinaryOp op, const Tensor& a, double s, Tensor& out) = nullptr;
  void (*unary)(UnaryOp op, const Tensor& x, Tensor& out) = nullptr;
  /// out = grad * (y > 0)  (y is relu's output).
  void (*relu_backward)(const Tensor& grad, const Tensor& y, Tensor& out) = nullptr;
  /// y += alpha * x (same numel).
  void (*axpy)(double alpha, const Tensor& x, Tensor& y) = nullptr;
  /// x viewed as [outer, n, inner]; out[outer, inner] = reduce over n.
  void (*reduce)(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                 Tensor& out) = nullptr;
  /// x viewed as [outer, n, inner]; out (int64) [outer, inner] = index of the first maximum.
  void (*argmax)(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) = nullptr;
  /// c = alpha * op(a) * op(b) + beta * c, 2-D, op(x) = x or xᵀ (no transposed copy made).
  /// beta == 0 ignores c's old contents (even NaN).
  void (*gemm)(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
               double beta, Tensor& c) = nullptr;
  /// Row-wise over the last dim of a 2-D [rows, cols] x: softmax, or log-softmax when log.
  /// Numerically stable (subtracts the row max).
  void (*softmax)(const Tensor& x, bool log, Tensor& out) = nullptr;
  /// Gradient of softmax (log = false: gx = y*(g - Σ g*y)) or log-softmax
  /// (log = true: gx = g - exp(y) * Σ g), y the forward output.
  void (*softmax_backward)(const Tensor& grad, const Tensor& y, bool log, Tensor& out) = nullptr;
  /// Cross-entropy on log-probabilities logp [N, C] with int64 targets [N] and label
  /// smoothing eps: loss[i] = -(1-eps)*logp[i, t_i] - eps/C * Σ_c logp[i, c].
  /// Throws std::out_of_range naming a target outside [0, C) (CPU; CUDA reports it after sync).
  void (*cross_entropy)(const Tensor& logp, const Tensor& target, double eps,
                        Tensor& loss) = nullptr;
  /// d loss / d logits = g[i] * (exp(logp[i, c]) - q[i, c]), q = (1-eps)*onehot + eps/C.
  void (*cross_entropy_backward)(const Tensor& logp, const Tensor& target, double eps,
                                 const Tensor& grad_loss, Tensor& grad_logits) = nullptr;
  /// BatchNorm training forward on x viewed as [N, C, L] (L = 1 for 2-D input):
  /// mean[c], invstd[c] = 1/sqrt(biased var + eps), y = (x - mean) * invstd * gamma + beta.
  /// gamma/beta may be undefined (affine = false: 1 and 0). var, float64 [C] whatever x's
  /// dtype, receives the biased variance Σ(x - mean)²/M as accumulated in double, before any
  /// rounding to x's dtype (the running statistics need it: rebuilding it from invstd cancels
  /// catastrophically when var ≪ eps); undefined = not wanted.
  void (*batch_norm_train)(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                           int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean,
                           Tensor& invstd, Tensor& var) = nullptr;
  /// Eval forward: y = (x - rm) / sqrt(rv + eps) * gamma + beta.
  void (*batch_norm_eval)(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          const Tensor& running_mean, const Tensor& running_var, double eps,
                          int64_t n, int64_t c, int64_t l, Tensor& y) = nullptr;
  /// Training backward. Any of grad_x / grad_gamma / grad_beta may be undefined (not wanted).
  /// x̂ = (x-mean)*invstd; grad_beta = Σ g; grad_gamma = Σ g x̂;
  /// grad_x = gamma*invstd/M * (M g - Σ g - x̂ Σ g x̂), M = N*L.
  void (*batch_norm_backward)(const Tensor& grad_y, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& invstd, int64_t n, int64_t c,
                              int64_t l, Tensor& grad_x, Tensor& grad_gamma,
                              Tensor& grad_beta) = nullptr;
  /// Philox4x32-10 fills (see tensor/generator.h for the exact stream layout): uniform in
  /// [lo, hi), or normal(mean, std) by Box-Muller. Bit-identical across devices.
  void (*philox_uniform)(uint64_t seed, uint64_t offset, double lo, double hi,
                         Tensor& out) = nullptr;
  void (*philox_normal)(uint64_t seed, uint64_t offset, double mean, double std,
                        Tensor& out) = nullptr;
  /// Inverted dropout with keep probability 1-p: mask[i] = (u_i >= p) / (1-p) with u_i the
  /// Philox uniform stream at (seed, offset); out = x * mask.
  void (*dropout)(uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,
                  Tensor& mask) = nullptr;
  /// out[i, ...] = src[index[i], ...] along dim 0; index int64. Throws std::out_of_range.
  void (*index_select)(const Tensor& src, const Tensor& index, Tensor& out) = nullptr;
  /// SGD (torch.optim.SGD): g = grad + wd*p; if momentum: buf = first ? g : momentum*buf +
  /// (1-dampening)*g; g = nesterov ? g + momentum*buf : buf; p -= lr*g.
  void (*sgd_step)(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
                   double momentum, double dampening, double weight_decay, bool nesterov,
                   bool first_step) = nullptr;
  /// Adam / AdamW (torch.optim): step t >= 1; decoupled = AdamW (p *= 1 - lr*wd) else
  /// g += wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
  /// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
  void (*adam_step)(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                    double lr, double beta1, double beta2, double eps, double weight_decay,
                    bool decoupled, int64_t step) = nullptr;

  /// The kernel `member`, or throws std::runtime_error "op <name> has no kernel for <device>".
  template <class Fn>
  Fn* get(Fn* Kernels::*member, const char* name, Device device) const {
    Fn* fn = this->*member;
    if (fn == nullptr) {
      throw std::runtime_error(std::string("op ") + name + " has no kernel for " + device.str());
    }
    return fn;
  }
};

/// The kernel table of `type`. For a type with nothing registered (CUDA without
/// --config=cuda) returns an empty table, whose get() throws naming the op and device.
const Kernels& kernels_for(DeviceType type);

/// Installs the table of `type` (called once by each backend at start-up; the table must
/// outlive the program).
void register_kernels(DeviceType type, const Kernels* table);

/// Shorthand used by ops.cc: PW_KERNEL(device, gemm)(...).
#define PW_KERNEL(device, name) \
  (::pipewright::kernels_for((device).type).get(&::pipewright::Kernels::name, #name, (device)))

}  // namespace pipewright
