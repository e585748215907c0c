// Fused optimizer steps: one kernel updates a list of parameters and their state in a single
// pass over memory (Note [Tensor lists]; the formulas of tensor/kernels.h, torch.optim.SGD and
// Adam/AdamW).
//
// Shape legend: param, grad, momentum_buffer / exp_avg / exp_avg_sq: the same n elements,
// contiguous. Scalar coefficients are computed on the host in double and rounded once to the
// parameter dtype, exactly as the CPU kernels do; per-element arithmetic is in that dtype.
// nvcc fuses a*b+c into FMAs, so results match the CPU to a few ulp, not bit for bit.
// Dtypes: float32 / float64.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_kernels/kernel_table.h"
#include "cuda_kernels/launch.cuh"

namespace pipewright::cuda {
namespace {

// Note [Tensor lists]
// ~~~~~~~~~~~~~~~~~~~
// An eager optimizer step issued one launch per parameter: 10 of the main job's 222 launches a
// step, and a GPT's step one per weight, bias and norm (PyTorch's "foreach" and "fused" optimizers
// exist for the same reason). adam_step_multi and sgd_step_multi hand the kernel a list of up to
// kListTensors parameters in its own arguments, as PyTorch's multi_tensor_apply does (kernel
// parameters are copied with the launch: no table in device memory to fill and order), with the
// blocks cut among them: tensor t gets blocks first_block[t] .. first_block[t + 1] - 1 (grid_for of
// its size), and each block walks its own tensor in a grid-stride loop over that tensor's blocks. A
// list whose blocks would pass the launch cap, or a 49th tensor, starts another launch. Each
// element's arithmetic is one function's (adam_element, sgd_element), whichever list it came in, so
// a tensor's bits do not depend on its neighbours; adam_step and sgd_step are one-tensor lists.
// adam_step_indirect's values (Note [Per-replay scalars], tensor/graph.h) are per tensor, 4 at 4 ×
// its position in the call's list, so a replayed bucket steps each parameter with its own step
// count.
// Under cudasim a struct argument's pointers would count as reads of whole allocations; the list
// names its own (each_pointer): parameter and state written, the gradient read, each to its
// tensor's size, so the race detector sees the update's writes.
constexpr int kListTensors = 48;

/// Up to kListTensors parameters, each with its gradient and up to two state tensors (SGD's
/// momentum buffer; Adam's two moments), nullptr where a step has none.
template <class T>
struct ParamList {
  T* param[kListTensors];
  const T* grad[kListTensors];
  T* state0[kListTensors];
  T* state1[kListTensors];
  int64_t n[kListTensors];
  int at[kListTensors];  // the tensor's position in the call's list (its per-step values)
  int first_block[kListTensors + 1];
  int count;

  template <class Sink>
  void each_pointer(const Sink& sink) const {  // cudasim's accesses (launch.h); host only
    for (int t = 0; t < count; ++t) {
      const size_t bytes = static_cast<size_t>(n[t]) * sizeof(T);
      sink(param[t], bytes, true);
      sink(grad[t], bytes, false);
      sink(state0[t], bytes, true);  // a sink skips nullptr
      sink(state1[t], bytes, true);
    }
  }
};

/// This block's tensor of `list` and its loop: for (i = first; i < n; i += stride).
struct ListSlot {
  int tensor;
  int64_t first, stride;
};

template <class T>
__device__ __forceinline__ ListSlot list_slot(const ParamList<T>& list) {
  const int block = static_cast<int>(blockIdx.x);
  int t = 0;
  while (block >= list.first_block[t + 1]) ++t;
  return {t, static_cast<int64_t>(block - list.first_block[t]) * blockDim.x + threadIdx.x,
          static_cast<int64_t>(list.first_block[t + 1] - list.first_block[t]) * blockDim.x};
}

template <class T>
struct SgdCoefficients {
  T lr, weight_decay, momentum, keep;  // keep = 1 - dampening
  bool use_weight_decay, use_momentum, nesterov, first_step;
};

template <class T>
__device__ __forceinline__ void sgd_element(T& p, T g, T* buf, const SgdCoefficients<T>& k) {
  if (k.use_weight_decay) g += k.weight_decay * p;
  if (k.use_momentum) {
    const T b = k.first_step ? g : k.momentum * *buf + k.keep * g;
    *buf = b;
    g = k.nesterov ? g + k.momentum * b : b;
  }
  p -= k.lr * g;
}

// `lr_at` (or nullptr): lr read from device memory when the kernel runs; `gate`: nothing is
// written unless it holds 0 (sgd_step_indirect).
template <class T>
__global__ void sgd_kernel(ParamList<T> list, SgdCoefficients<T> k, const T* lr_at,
                           const double* gate) {
  if (gate != nullptr && !(*gate == 0.0)) return;
  if (lr_at != nullptr) k.lr = *lr_at;
  const ListSlot s = list_slot(list);
  T* p = list.param[s.tensor];
  const T* g = list.grad[s.tensor];
  T* buf = list.state0[s.tensor];
  for (int64_t i = s.first; i < list.n[s.tensor]; i += s.stride) {
    sgd_element(p[i], g[i], k.use_momentum ? buf + i : nullptr, k);
  }
}

template <class T>
struct AdamCoefficients {
  T b1, b2, one_minus_b1, one_minus_b2, bias1, bias2, lr, eps, weight_decay, decay;
  bool decoupled, use_weight_decay;
};

// The parameters of a launch stay under CUDA's classic 4 KiB.
static_assert(sizeof(ParamList<double>) + sizeof(AdamCoefficients<double>) + 16 <= 4096);

template <class T>
__device__ __forceinline__ void adam_element(T& p, T g, T& m, T& v, const AdamCoefficients<T>& k) {
  T param = p;
  if (k.decoupled) {
    param *= k.decay;  // AdamW: shrink the weight, not the gradient
  } else if (k.use_weight_decay) {
    g += k.weight_decay * param;
  }
  const T mi = k.b1 * m + k.one_minus_b1 * g;
  const T vi = k.b2 * v + k.one_minus_b2 * g * g;
  m = mi;
  v = vi;
  p = param - k.lr * (mi / k.bias1) / (sqrt(vi / k.bias2) + k.eps);
}

// `step_values` (or nullptr): each tensor's lr, bias1, bias2 and decay, 4 values at 4 × its
// position in the call's list, read from device memory when the kernel runs
// (adam_step_indirect); the arithmetic is the same either way.
template <class T>
__global__ void adam_kernel(ParamList<T> list, AdamCoefficients<T> k, const T* step_values,
                            const double* gate) {
  if (gate != nullptr && !(*gate == 0.0)) return;  // a failed step: no update
  const ListSlot s = list_slot(list);
  if (step_values != nullptr) {
    const T* mine = step_values + 4 * static_cast<int64_t>(list.at[s.tensor]);
    k.lr = mine[0];
    k.bias1 = mine[1];
    k.bias2 = mine[2];
    k.decay = mine[3];
  }
  T* p = list.param[s.tensor];
  const T* g = list.grad[s.tensor];
  T* m = list.state0[s.tensor];
  T* v = list.state1[s.tensor];
  for (int64_t i = s.first; i < list.n[s.tensor]; i += s.stride) {
    adam_element(p[i], g[i], m[i], v[i], k);
  }
}

/// One parameter of a list on the host: its tensors (state undefined where a step has none).
struct ListEntry {
  const Tensor* param;
  const Tensor* grad;
  const Tensor* state0;
  const Tensor* state1;
};

/// Calls `launch(list, blocks)` for each list of `entries` (one dtype T, one device; empty
/// tensors left out): up to kListTensors tensors and launch_limits().max_grid blocks a list.
template <class T, class Launch>
void for_each_list(const std::vector<ListEntry>& entries, Launch&& launch) {
  const int64_t max_blocks = launch_limits().max_grid;
  ParamList<T> list{};
  int64_t blocks = 0;
  auto flush = [&] {
    if (list.count == 0) return;
    list.first_block[list.count] = static_cast<int>(blocks);
    launch(list, static_cast<unsigned>(blocks));
    list = ParamList<T>{};
    blocks = 0;
  };
  auto data = [](const Tensor* t) { return t->defined() ? t->data<T>() : nullptr; };
  for (size_t position = 0; position < entries.size(); ++position) {
    const ListEntry& e = entries[position];
    const int64_t n = e.param->numel();
    if (n == 0) continue;
    const int64_t need = grid_for(n);
    if (list.count == kListTensors || blocks + need > max_blocks) flush();
    const int c = list.count++;
    list.param[c] = e.param->data<T>();
    list.grad[c] = e.grad->data<T>();
    list.state0[c] = data(e.state0);
    list.state1[c] = data(e.state1);
    list.n[c] = n;
    list.at[c] = static_cast<int>(position);
    list.first_block[c] = static_cast<int>(blocks);
    blocks += need;
  }
  flush();
}

/// Throws std::invalid_argument naming `name` and the tensor's position, before anything is
/// launched, unless every tensor of `entries` has the first parameter's dtype and device, each
/// gradient and state its parameter's size, and the states a step needs (`states` of them)
/// are defined.
void check_entries(const std::vector<ListEntry>& entries, int states, const char* name) {
  const Tensor& first = *entries.front().param;
  for (size_t position = 0; position < entries.size(); ++position) {
    const ListEntry& e = entries[position];
    const Tensor* all[] = {e.param, e.grad, e.state0, e.state1};
    for (int i = 0; i < 2 + states; ++i) {
      const Tensor& t = *all[i];
      const char* what = i == 0 ? "parameter" : i == 1 ? "gradient" : "state";
      if (!t.defined()) {
        throw std::invalid_argument(std::string(name) + ": tensor " + std::to_string(position) +
                                    " has an undefined " + what);
      }
      if (t.dtype() != first.dtype() || t.device() != first.device() ||
          t.numel() != e.param->numel()) {
        throw std::invalid_argument(
            std::string(name) + ": tensor " + std::to_string(position) + "'s " + what + " is " +
            std::to_string(t.numel()) + " " + dtype_name(t.dtype()) + " values on " +
            t.device().str() + " where the list is of " + dtype_name(first.dtype()) + " on " +
            first.device().str() + " and its parameter has " +
            std::to_string(e.param->numel()));
      }
    }
  }
}

/// The SGD launches for `tensors`; lr read from `lr_at` (device memory) when given.
void launch_sgd(const std::vector<SgdTensors>& tensors, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov, bool first_step,
                const void* lr_at, const void* gate, const char* name) {
  if (tensors.empty()) return;
  const Tensor none;
  std::vector<ListEntry> entries;
  for (const SgdTensors& t : tensors) {
    entries.push_back({&t.param, &t.grad, momentum != 0.0 ? &t.momentum_buffer : &none, &none});
  }
  check_entries(entries, momentum != 0.0 ? 1 : 0, name);
  LaunchContext ctx(tensors.front().param);
  dispatch_floating(tensors.front().param.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    const SgdCoefficients<T> k{static_cast<T>(lr),
                               static_cast<T>(weight_decay),
                               static_cast<T>(momentum),
                               static_cast<T>(1.0 - dampening),
                               weight_decay != 0.0,
                               momentum != 0.0,
                               nesterov,
                               first_step};
    for_each_list<T>(entries, [&](const ParamList<T>& list, unsigned blocks) {
      PW_LAUNCH(sgd_kernel<T>, blocks, kBlock, 0, ctx.stream)(
          list, k, static_cast<const T*>(lr_at), static_cast<const double*>(gate));
      PW_CUDA_CHECK_LAUNCH("sgd_kernel");
    });
  });
}

/// The Adam launches for `tensors`. `bias1`, `bias2`, `lr` and `decay` are the step's values,
/// or ignored when `step_values` (device memory, 4 values per tensor) holds them; `gate`: see
/// adam_step_indirect.
void launch_adam(const std::vector<AdamTensors>& tensors, double beta1, double beta2,
                 double eps, double weight_decay, bool decoupled, double bias1, double bias2,
                 double lr, double decay, const void* step_values, const void* gate,
                 const char* name) {
  if (tensors.empty()) return;
  std::vector<ListEntry> entries;
  for (const AdamTensors& t : tensors) {
    entries.push_back({&t.param, &t.grad, &t.exp_avg, &t.exp_avg_sq});
  }
  check_entries(entries, 2, name);
  LaunchContext ctx(tensors.front().param);
  dispatch_floating(tensors.front().param.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    const AdamCoefficients<T> k{static_cast<T>(beta1),
                                static_cast<T>(beta2),
                                static_cast<T>(1.0 - beta1),
                                static_cast<T>(1.0 - beta2),
                                static_cast<T>(bias1),
                                static_cast<T>(bias2),
                                static_cast<T>(lr),
                                static_cast<T>(eps),
                                static_cast<T>(weight_decay),
                                static_cast<T>(decay),
                                decoupled,
                                weight_decay != 0.0};
    for_each_list<T>(entries, [&](const ParamList<T>& list, unsigned blocks) {
      PW_LAUNCH(adam_kernel<T>, blocks, kBlock, 0, ctx.stream)(
          list, k, static_cast<const T*>(step_values), static_cast<const double*>(gate));
      PW_CUDA_CHECK_LAUNCH("adam_kernel");
    });
  });
}

/// Throws std::invalid_argument naming `name` unless step >= 1.
void check_step(int64_t step, const char* name) {
  if (step < 1) {
    throw std::invalid_argument(std::string(name) + ": step must be >= 1, got " +
                                std::to_string(step));
  }
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, double lr,
              double momentum, double dampening, double weight_decay, bool nesterov,
              bool first_step) {
  launch_sgd({{param, grad, momentum_buffer}}, lr, momentum, dampening, weight_decay, nesterov,
             first_step, nullptr, nullptr, "sgd_step");
}

void sgd_step_indirect(Tensor& param, const Tensor& grad, Tensor& momentum_buffer,
                       const void* lr, const void* gate, double momentum, double dampening,
                       double weight_decay, bool nesterov) {
  launch_sgd({{param, grad, momentum_buffer}}, 0.0, momentum, dampening, weight_decay, nesterov,
             false, lr, gate, "sgd_step_indirect");
}

void sgd_step_multi(const std::vector<SgdTensors>& tensors, double lr, double momentum,
                    double dampening, double weight_decay, bool nesterov, bool first_step,
                    const void* lr_at, const void* gate) {
  if (lr_at != nullptr) {  // lr from memory when the kernels run
    launch_sgd(tensors, 0.0, momentum, dampening, weight_decay, nesterov, false, lr_at, gate,
               "sgd_step_indirect");
    return;
  }
  launch_sgd(tensors, lr, momentum, dampening, weight_decay, nesterov, first_step, nullptr,
             nullptr, "sgd_step");
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               double lr, double beta1, double beta2, double eps, double weight_decay,
               bool decoupled, int64_t step) {
  check_step(step, "adam_step");
  adam_step_multi({{param, grad, exp_avg, exp_avg_sq}}, lr, beta1, beta2, eps, weight_decay,
                  decoupled, step, nullptr, nullptr);
}

void adam_step_indirect(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                        const void* coefficients, const void* gate, double beta1, double beta2,
                        double eps, double weight_decay, bool decoupled) {
  adam_step_multi({{param, grad, exp_avg, exp_avg_sq}}, 0.0, beta1, beta2, eps, weight_decay,
                  decoupled, 1, coefficients, gate);
}

void adam_step_multi(const std::vector<AdamTensors>& tensors, double lr, double beta1,
                     double beta2, double eps, double weight_decay, bool decoupled, int64_t step,
                     const void* coefficients, const void* gate) {
  if (coefficients != nullptr) {  // the step's values from memory when the kernels run
    launch_adam(tensors, beta1, beta2, eps, weight_decay, decoupled, 1.0, 1.0, 0.0, 1.0,
                coefficients, gate, "adam_step_multi");
    return;
  }
  check_step(step, "adam_step_multi");
  const double t = static_cast<double>(step);
  launch_adam(tensors, beta1, beta2, eps, weight_decay, decoupled, 1.0 - std::pow(beta1, t),
              1.0 - std::pow(beta2, t), lr, 1.0 - lr * weight_decay, nullptr, nullptr,
              "adam_step");
}

}  // namespace pipewright::cuda
