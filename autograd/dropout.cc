// dropout: forward and backward are the same kernel call (tensor/kernels.h `dropout`), once on
// x and once on the gradient, with the same (seed, offset).
#include "autograd/dropout.h"

#include <stdexcept>
#include <string>

#include "autograd/function_node.h"
#include "tensor/graph.h"
#include "tensor/kernels.h"

namespace pipewright::autograd {
namespace {

/// x ⊙ mask(seed, offset, p); the seed read from `seed_slot` when the kernel runs if given.
Tensor apply_mask(const Tensor& x, double p, uint64_t seed, uint64_t offset,
                  const void* seed_slot) {
  if (seed_slot == nullptr && DeviceGraph::capturing_on(x.device()) != nullptr) {
    // The seed would be a kernel argument: every replay would draw this mask again.
    // (Only keyed dropout has a slot: Note [A step as one graph], pipeline/step_graph.h.)
    throw std::logic_error("dropout on " + x.device().str() +
                           " inside a graph capture without a seed slot: a replay would repeat "
                           "this step's mask (use keyed randomness, nn/random_key.h)");
  }
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), options_of(x));
  Tensor mask = Tensor::empty(x.shape(), options_of(x));
  if (seed_slot != nullptr) {
    PW_KERNEL(x.device(), dropout_indirect)(seed_slot, offset, p, xc, out, mask);
  } else {
    PW_KERNEL(x.device(), dropout)(seed, offset, p, xc, out, mask);
  }
  return out;
}

class DropoutBackward final : public FunctionNode {
 public:
  DropoutBackward(double p, uint64_t seed, uint64_t offset, const void* seed_slot)
      : p_(p), seed_(seed), offset_(offset), seed_slot_(seed_slot) {}
  const char* name() const override { return "DropoutBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    return {apply_mask(grads[0], p_, seed_, offset_, seed_slot_)};
  }

 private:
  double p_;
  uint64_t seed_, offset_;
  const void* seed_slot_;
};

}  // namespace

uint64_t dropout_stream_length(const Tensor& x) {
  return static_cast<uint64_t>(x.numel());
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset,
               const void* seed_slot) {
  if (!(p >= 0.0 && p < 1.0)) {
    throw std::invalid_argument("dropout: p must be in [0, 1), got " + std::to_string(p));
  }
  Tensor y = apply_mask(x, p, seed, offset, seed_slot);
  record_op({x}, {&y},
            [&] { return std::make_shared<DropoutBackward>(p, seed, offset, seed_slot); });
  return y;
}

}  // namespace pipewright::autograd
