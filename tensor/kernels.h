// The kernel table: one struct of function pointers per device type, made from one list.
//
// tensor/ops.cc validates arguments (shapes, dtypes, devices), makes inputs contiguous,
// allocates outputs, then calls the kernel of the inputs' device type through kernels_for().
// So every kernel may assume: all tensors contiguous, on one device, shapes already checked,
// outputs allocated, floating dtype float32 or float64 unless stated. CPU kernels live in
// tensor/cpu/; CUDA kernels in cuda_kernels/, registered at start-up. A null entry means "not
// implemented for this device": kernels_for(...).get(&Kernels::x, "x", device) throws
// std::runtime_error "op x has no kernel for cuda:0".
//
// Note [One kernel list]
// ~~~~~~~~~~~~~~~~~~~~~~
// PIPEWRIGHT_KERNELS below is the only place a kernel's name and signature are written. It is
// an "X-macro": a list of X(name, (parameters)) lines that each user expands with its own X.
//   - struct Kernels expands it into one pointer member per kernel;
//   - tensor/cpu/kernel_table.h and cuda_kernels/kernel_table.h expand it into the declarations
//     `void name(parameters);` in namespaces pipewright::cpu and pipewright::cuda;
//   - tensor/cpu/kernel_table.cc and cuda_kernels/register.cc expand it into `k.name = &name;`.
// So a device's table cannot miss a kernel or disagree with its signature: a kernel the list
// names but a device does not define is an undefined reference to pipewright::<device>::<name>
// when the program links (the check a hand-kept table lacks). A kernel that only some devices
// have goes in PIPEWRIGHT_CPU_ONLY_KERNELS instead (empty today): the CPU table fills it, other
// devices leave it null, and its caller checks `kernels_for(type).name != nullptr` and runs
// the unfused ops where it is null.
// (A macro rather than generated code, so the list stays plain C++ that grep finds; each
// device's kernel_table.h says which file defines which kernel.)
//
// Adding an op: one X line here (or in the CPU-only list), the kernel in tensor/cpu/*.cc and in
// cuda_kernels/*.cu with that name and signature, its wrapper in ops.h / ops.cc, and its test.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kRSub, kRDiv };  // R: b op a
enum class UnaryOp : uint8_t { kNeg, kExp, kLog, kSqrt, kRelu, kSquare, kAbs, kTanh, kSigmoid,
                               kErf };
enum class ReduceOp : uint8_t { kSum, kMean, kMax };

/// One parameter of a multi-tensor SGD step (sgd_step_multi): the parameter, its gradient and
/// its momentum buffer (undefined without momentum), of one shape, dtype and device,
/// contiguous (handles: the kernel writes param and momentum_buffer in place).
struct SgdTensors {
  Tensor param, grad, momentum_buffer;
};

/// One parameter of a multi-tensor Adam step (adam_step_multi): the parameter, its gradient and
/// its two moments, of one shape, dtype and device, contiguous (handles: the kernel writes
/// param, exp_avg and exp_avg_sq in place).
struct AdamTensors {
  Tensor param, grad, exp_avg, exp_avg_sq;
};

/// Every kernel, every device. One X(name, (parameters)) per kernel, documented above it.
#define PIPEWRIGHT_KERNELS(X)                                                                      \
  /* out[i] = value. */                                                                            \
  X(fill, (Tensor& out, double value))                                                             \
  /* dst (contiguous) = src (any strides, same shape and dtype, same device). */                   \
  X(copy_strided, (const Tensor& src, Tensor& dst))                                                \
  /* dst = src converted (same shape, same device, dtypes differ). */                              \
  X(cast, (const Tensor& src, Tensor& dst))                                                        \
  /* out = a op b. b.numel() == a.numel(), or b.numel() == 1, or b's shape equals the trailing */  \
  /* dims of a (b repeats with period b.numel()). out has a's shape. */                            \
  X(binary, (BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out))                          \
  /* out = a op s. */                                                                              \
  X(binary_scalar, (BinaryOp op, const Tensor& a, double s, Tensor& out))                          \
  /* out = op(x) elementwise. */                                                                   \
  X(unary, (UnaryOp op, const Tensor& x, Tensor& out))                                             \
  /* out = grad * (y > 0)  (y is relu's output). */                                                \
  X(relu_backward, (const Tensor& grad, const Tensor& y, Tensor& out))                             \
  /* y += alpha * x (same numel). */                                                               \
  X(axpy, (double alpha, const Tensor& x, Tensor& y))                                              \
  /* x viewed as [outer, n, inner]; out[outer, inner] = reduce over n. */                          \
  X(reduce, (ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out))  \
  /* total[0] += float64(Σ term(x)) (term: kSquare or kAbs; total: float64 [1], x's device): the */\
  /* bits of total + float64(reduce(kSum, unary(term, x), 1, numel, 1)), in one pass. */           \
  X(norm_share_add, (UnaryOp term, const Tensor& x, Tensor& total))                                \
  /* x viewed as [outer, n, inner]; out (int64) [outer, inner] = index of the first maximum. */    \
  X(argmax, (const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out))               \
  /* c = alpha * op(a) * op(b) + beta * c, 2-D, op(x) = x or xᵀ (no transposed copy made). */      \
  /* beta == 0 ignores c's old contents (even NaN). a and b may both be bfloat16 or both */        \
  /* float16 with c float32 (mixed precision: products and sums in float32). */                    \
  X(gemm, (bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,             \
           double beta, Tensor& c))                                                                \
  /* c [M, N] = op(a)·op(b) + bias, the bias [N] (c's dtype) added to every row: a Linear's */     \
  /* forward, torch.addmm(bias, a, b). Dtypes as gemm's. A GPU adds the bias in the GEMM's */      \
  /* epilogue (cuBLASLt; Note [The bias in the epilogue], cuda_kernels/gemm.cc), the CPU */        \
  /* copies it into c and runs the GEMM with beta 1. */                                            \
  X(gemm_bias, (bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& bias,  \
                Tensor& c))                                                                        \
  /* Row-wise over the last dim of a 2-D [rows, cols] x: softmax, or log-softmax when log. */      \
  /* Numerically stable (subtracts the row max). */                                                \
  X(softmax, (const Tensor& x, bool log, Tensor& out))                                             \
  /* Gradient of softmax (log = false: gx = y*(g - Σ g*y)) or log-softmax */                       \
  /* (log = true: gx = g - exp(y) * Σ g), y the forward output. */                                 \
  X(softmax_backward, (const Tensor& grad, const Tensor& y, bool log, Tensor& out))                \
  /* Cross-entropy on log-probabilities logp [N, C] with int64 targets [N] and label */            \
  /* smoothing eps: loss[i] = -(1-eps)*logp[i, t_i] - eps/C * Σ_c logp[i, c]. */                   \
  /* Throws std::out_of_range naming a target outside [0, C) (CPU; CUDA reports it after sync). */ \
  X(cross_entropy, (const Tensor& logp, const Tensor& target, double eps, Tensor& loss))           \
  /* d loss / d logits = g[i] * (exp(logp[i, c]) - q[i, c]), q = (1-eps)*onehot + eps/C. */        \
  X(cross_entropy_backward, (const Tensor& logp, const Tensor& target, double eps,                 \
                             const Tensor& grad_loss, Tensor& grad_logits))                        \
  /* BatchNorm training forward on x viewed as [N, C, L] (L = 1 for 2-D input): */                 \
  /* mean[c], invstd[c] = 1/sqrt(biased var + eps), y = (x - mean) * invstd * gamma + beta. */     \
  /* gamma/beta may be undefined (affine = false: 1 and 0). var, float64 [C] whatever x's */       \
  /* dtype, receives the biased variance Σ(x - mean)²/M as accumulated in double, before any */    \
  /* rounding to x's dtype (the running statistics need it: rebuilding it from invstd cancels */   \
  /* catastrophically when var ≪ eps); undefined = not wanted. */                                  \
  X(batch_norm_train, (const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,       \
                       int64_t n, int64_t c, int64_t l, Tensor& y, Tensor& mean, Tensor& invstd,   \
                       Tensor& var))                                                               \
  /* Eval forward: y = (x - rm) / sqrt(rv + eps) * gamma + beta. */                                \
  X(batch_norm_eval, (const Tensor& x, const Tensor& gamma, const Tensor& beta,                    \
                      const Tensor& running_mean, const Tensor& running_var, double eps,           \
                      int64_t n, int64_t c, int64_t l, Tensor& y))                                 \
  /* Training backward. Any of grad_x / grad_gamma / grad_beta may be undefined (not wanted). */   \
  /* x̂ = (x-mean)*invstd; grad_beta = Σ g; grad_gamma = Σ g x̂; */                                \
  /* grad_x = gamma*invstd/M * (M g - Σ g - x̂ Σ g x̂), M = N*L. */                                \
  X(batch_norm_backward, (const Tensor& grad_y, const Tensor& x, const Tensor& gamma,              \
                          const Tensor& mean, const Tensor& invstd, int64_t n, int64_t c,          \
                          int64_t l, Tensor& grad_x, Tensor& grad_gamma, Tensor& grad_beta))       \
  /* BatchNorm's batch statistics merged over micro-batches (Chan et al., 1979), in place, in */   \
  /* double: acc_mean, acc_m2 (float64 [C]) describe `seen` values; mean (any floating dtype) */   \
  /* and var (float64, biased) `count` more. With d = mean - acc_mean, n = seen + count: */        \
  /* acc_mean += d count/n; acc_m2 += var count + d² seen count/n. */                             \
  X(batch_norm_accumulate, (const Tensor& mean, const Tensor& var, double count, double seen,      \
                            Tensor& acc_mean, Tensor& acc_m2))                                     \
  /* BatchNorm's running statistics from those over `count` values, in double, rounded once: */   \
  /* f = momentum, or 1/(num_batches_tracked + 1) when momentum < 0 (torch's momentum=None); */    \
  /* running_mean = (1-f) running_mean + f mean; running_var = (1-f) running_var + f m2 / */       \
  /* (count - 1) (m2 / count when count is 1); num_batches_tracked (int64 [1]) += 1. `gate` */     \
  /* (nullable, a float64 on the device): nothing changes unless it is 0 (a replayed graph's */    \
  /* failed step, DeviceGraph::set_gate). */                                                       \
  X(batch_norm_commit, (const Tensor& mean, const Tensor& m2, double count, double momentum,       \
                        Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked,    \
                        const void* gate))                                                         \
  /* Philox4x32-10 fills (see tensor/generator.h for the exact stream layout): uniform in */       \
  /* [lo, hi), or normal(mean, std) by Box-Muller. Bit-identical across devices. */                \
  X(philox_uniform, (uint64_t seed, uint64_t offset, double lo, double hi, Tensor& out))           \
  X(philox_normal, (uint64_t seed, uint64_t offset, double mean, double std, Tensor& out))         \
  /* Inverted dropout with keep probability 1-p: mask[i] = (u_i >= p) / (1-p) with u_i the */      \
  /* Philox uniform stream at (seed, offset); out = x * mask. */                                   \
  X(dropout, (uint64_t seed, uint64_t offset, double p, const Tensor& x, Tensor& out,              \
              Tensor& mask))                                                                       \
  /* dropout with its seed a uint64 read from `seed` (memory of x's device) when the kernel */     \
  /* runs: a replayed graph's mask (Note [Per-replay scalars], tensor/graph.h). */                 \
  X(dropout_indirect, (const void* seed, uint64_t offset, double p, const Tensor& x, Tensor& out,  \
                       Tensor& mask))                                                              \
  /* out[i, ...] = src[index[i], ...] along dim 0; index int64. Throws std::out_of_range. */       \
  X(index_select, (const Tensor& src, const Tensor& index, Tensor& out))                           \
  /* SGD (torch.optim.SGD): g = grad + wd*p; if momentum: buf = first ? g : momentum*buf + */      \
  /* (1-dampening)*g; g = nesterov ? g + momentum*buf : buf; p -= lr*g. */                         \
  X(sgd_step, (Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,              \
               double momentum, double dampening, double weight_decay, bool nesterov,              \
               bool first_step))                                                                   \
  /* sgd_step after the first step (first_step false), with lr read as one value of param's */    \
  /* dtype from `lr` (memory of param's device) when the kernel runs, and nothing written */       \
  /* unless `gate` (nullable, a float64) is 0: a replayed graph's update (tensor/graph.h). */      \
  X(sgd_step_indirect, (Tensor& param, const Tensor& grad, Tensor& momentum_buffer,                \
                        const void* lr, const void* gate, double momentum, double dampening,       \
                        double weight_decay, bool nesterov))                                       \
  /* sgd_step over a list of parameters (PyTorch's multi-tensor SGD): each as sgd_step, or, */     \
  /* with `lr_at` not null, as sgd_step_indirect with it and `gate` (lr and first_step unused; */  \
  /* gate only then). One dtype and device throughout; a GPU updates up to 48 tensors in one */    \
  /* launch, each element with sgd_step's bits, and throws std::invalid_argument naming the */     \
  /* tensor, before any launch, for another dtype or device, a size unlike its parameter's or */   \
  /* a buffer missing where momentum != 0. */                                                      \
  X(sgd_step_multi, (const std::vector<SgdTensors>& tensors, double lr, double momentum,           \
                     double dampening, double weight_decay, bool nesterov, bool first_step,        \
                     const void* lr_at, const void* gate))                                         \
  /* Adam / AdamW (torch.optim): step t >= 1; decoupled = AdamW (p *= 1 - lr*wd) else */           \
  /* g += wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²; */                                      \
  /* p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). */                                     \
  X(adam_step, (Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, \
                double beta1, double beta2, double eps, double weight_decay, bool decoupled,       \
                int64_t step))                                                                     \
  /* adam_step with its per-step values lr, 1-b1^t, 1-b2^t and 1-lr*wd read, as 4 values of */    \
  /* param's dtype, from `coefficients` (memory of param's device) when the kernel runs, not */    \
  /* when it is issued: a replayed graph's update (Note [Per-replay scalars], tensor/graph.h). */  \
  /* `gate` (nullable, a float64 there): nothing is written unless it is 0 (a failed step). */     \
  X(adam_step_indirect, (Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,   \
                         const void* coefficients, const void* gate, double beta1, double beta2,   \
                         double eps, double weight_decay, bool decoupled))                         \
  /* adam_step over a list of parameters (PyTorch's multi-tensor Adam): each as adam_step at */    \
  /* `step`, or, with `coefficients` not null, as adam_step_indirect with its own 4 values at */   \
  /* coefficients + 4 × its position in the list, and `gate` (lr and step unused; gate only */     \
  /* then). Throws std::invalid_argument for step < 1 without coefficients. One dtype and */       \
  /* device throughout; a GPU updates up to 48 tensors in one launch, each element with */         \
  /* adam_step's bits, and throws as sgd_step_multi does for a tensor unlike the list. */          \
  X(adam_step_multi, (const std::vector<AdamTensors>& tensors, double lr, double beta1,            \
                      double beta2, double eps, double weight_decay, bool decoupled,               \
                      int64_t step, const void* coefficients, const void* gate))                   \
  /* ---- transformer blocks (tensor/batched_matmul.h, masking.h, gelu.h, normalization.h, */      \
  /* index_add.h) ---- */                                                                          \
  /* c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for i < B, op as in gemm: a [Ba, ., .], */   \
  /* b [Bb, ., .], c [B, M, N], Ba and Bb each B or 1 (1: one matrix shared by every i). */        \
  /* Mixed precision as gemm's. */                                                                 \
  X(gemm_batched, (bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,     \
                   double beta, Tensor& c))                                                        \
  /* out[i] = mask[i % mask.numel()] != 0 ? value : x[i]; mask of any dtype, its numel divides */  \
  /* x's (a mask of x's trailing dims repeats over the leading ones). */                           \
  X(masked_fill, (const Tensor& x, const Tensor& mask, double value, Tensor& out))                 \
  /* x, out [B, R, C]: out[b, i, j] = x[b, i, j] where j - i >= diagonal (upper) or */             \
  /* j - i <= diagonal (lower), else 0 (torch.triu / torch.tril). */                               \
  X(triangular, (const Tensor& x, int64_t diagonal, bool upper, Tensor& out))                      \
  /* x, out [B, L, S]: row i of each matrix is softmax over j <= i of scale * x[b, i, j], */       \
  /* and 0 for j > i (a causal mask, top-left aligned like torch's is_causal). */                  \
  X(causal_softmax, (const Tensor& x, double scale, Tensor& out))                                  \
  /* Its gradient, y the forward output: gx = scale * y * (g - Σ_j g y) (0 where masked). */       \
  X(causal_softmax_backward, (const Tensor& grad, const Tensor& y, double scale, Tensor& out))     \
  /* Attention without the scores (Note [Tiled attention], tensor/cpu/attention.cc): q */         \
  /* [N, L, D], k, v [N, S, D], all float32, all float64, or all one 16-bit dtype; out */          \
  /* [N, L, D] and lse */                                                                          \
  /* [N, L] in float32 (16-bit inputs) or the inputs' dtype: out = softmax(scale q kᵀ) v with */   \
  /* keys j > i hidden when causal (top-left aligned), lse = log Σ_j exp(scale q_i·k_j). */        \
  X(flash_attention, (const Tensor& q, const Tensor& k, const Tensor& v, double scale,             \
                      bool causal, Tensor& out, Tensor& lse))                                      \
  /* Its gradients, recomputing the scores from q, k and lse; grad_out in q's dtype, grad_q, */    \
  /* grad_k, grad_v in out's. */                                                                   \
  X(flash_attention_backward, (const Tensor& q, const Tensor& k, const Tensor& v,                  \
                               const Tensor& out, const Tensor& grad_out, const Tensor& lse,       \
                               double scale, bool causal, Tensor& grad_q, Tensor& grad_k,          \
                               Tensor& grad_v))                                                    \
  /* dst[index[i], ...] += src[i, ...] along dim 0 (index int64 [K], src [K, ...]), in index */    \
  /* order for each element. Throws std::out_of_range naming an index outside [0, dst rows). */    \
  X(index_add, (Tensor& dst, const Tensor& index, const Tensor& src))                              \
  /* GELU: x * Φ(x) = x/2 * (1 + erf(x/√2)), or with tanh_approximation */                         \
  /* x/2 * (1 + tanh(√(2/π) (x + 0.044715 x³))); the backward is g * d/dx of the same. */          \
  X(gelu, (const Tensor& x, bool tanh_approximation, Tensor& out))                                 \
  X(gelu_backward, (const Tensor& grad, const Tensor& x, bool tanh_approximation, Tensor& out))    \
  /* LayerNorm over the rows of x [rows, cols]: mean[r], rstd[r] = 1/sqrt(biased var + eps), */    \
  /* y = (x - mean) * rstd * weight + bias. rms: RMSNorm, mean not used (may be undefined), */     \
  /* rstd = 1/sqrt(mean of x² + eps), y = x * rstd * weight. weight, bias [cols] or undefined */   \
  /* (1 and 0); mean, rstd [rows] in x's dtype. */                                                 \
  X(layer_norm, (const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms,  \
                 Tensor& y, Tensor& mean, Tensor& rstd))                                           \
  /* Its gradients; any of grad_x / grad_weight / grad_bias may be undefined (not wanted). */      \
  /* x̂ = (x - mean) * rstd, ĝ = g * weight: grad_bias = Σ_rows g, grad_weight = Σ_rows g x̂, */   \
  /* grad_x = rstd * (ĝ - mean_cols(ĝ) - x̂ mean_cols(ĝ x̂)) (rms: without the mean_cols(ĝ)). */   \
  X(layer_norm_backward, (const Tensor& grad_y, const Tensor& x, const Tensor& weight,             \
                          const Tensor& mean, const Tensor& rstd, bool rms, Tensor& grad_x,        \
                          Tensor& grad_weight, Tensor& grad_bias))

/// Kernels that only the CPU has (Note [One kernel list]); null on other devices. None yet.
#define PIPEWRIGHT_CPU_ONLY_KERNELS(X)

struct Kernels {
#define PIPEWRIGHT_KERNEL_POINTER(name, params) void(*name) params = nullptr;
  PIPEWRIGHT_KERNELS(PIPEWRIGHT_KERNEL_POINTER)
  PIPEWRIGHT_CPU_ONLY_KERNELS(PIPEWRIGHT_KERNEL_POINTER)
#undef PIPEWRIGHT_KERNEL_POINTER

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
