// softmax / log_softmax: the forward is ops::softmax / ops::log_softmax, the backward the
// kernel table's softmax_backward on the rows of the last dimension.
#include "autograd/softmax.h"

#include "autograd/function_node.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"

namespace pipewright::autograd {
namespace {

class SoftmaxBackward final : public FunctionNode {
 public:
  SoftmaxBackward(const Tensor& y, bool log) : FunctionNode({y}), log_(log) {}
  const char* name() const override { return log_ ? "LogSoftmaxBackward" : "SoftmaxBackward"; }

 protected:
  std::vector<Tensor> backward(const std::vector<Tensor>& grads, const std::vector<bool>&) override {
    const Tensor& y = saved(0);
    Tensor y_rows = as_rows(y), g_rows = as_rows(grads[0]);
    Tensor gx = Tensor::empty(y_rows.shape(), options_of(y));
    PW_KERNEL(y.device(), softmax_backward)(g_rows, y_rows, log_, gx);
    return {gx.reshape(y.shape())};
  }

 private:
  bool log_;
};

Tensor record_softmax(const Tensor& x, Tensor y, bool log) {
  record_op({x}, {&y}, [&] { return std::make_shared<SoftmaxBackward>(y, log); });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x) { return record_softmax(x, ops::softmax(x), false); }
Tensor log_softmax(const Tensor& x) { return record_softmax(x, ops::log_softmax(x), true); }

}  // namespace pipewright::autograd
