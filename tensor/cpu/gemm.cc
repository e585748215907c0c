// GEMM through Eigen: c = alpha * op(a) * op(b) + beta * c on row-major maps of the tensors.
// op(x) = x.transpose() is an expression, not a copy: Eigen's product kernel reads the
// transposed operand in place. noalias() tells Eigen c does not overlap a or b, so the product
// is written straight into c without a temporary. Eigen parallelises the product with OpenMP
// using the calling thread's omp_get_max_threads() (see tensor/threads.h).
#include "tensor/cpu/common.h"
#include "tensor/cpu/kernel_table.h"

namespace pipewright::cpu {
namespace {

template <class T>
using MatrixMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

template <class T, class A, class B>
void gemm_into(const A& a, const B& b, T alpha, T beta, const Tensor& c_tensor) {
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> c(
      c_tensor.data<T>(), c_tensor.size(0), c_tensor.size(1));
  if (beta == T(0)) {
    c.noalias() = alpha * a * b;  // c's old contents are never read (even NaN)
    return;
  }
  if (beta != T(1)) c *= beta;
  c.noalias() += alpha * a * b;
}

template <class T>
void gemm_typed(bool trans_a, bool trans_b, T alpha, const Tensor& a_t, const Tensor& b_t,
                T beta, Tensor& c) {
  const MatrixMap<T> a(a_t.data<T>(), a_t.size(0), a_t.size(1));
  const MatrixMap<T> b(b_t.data<T>(), b_t.size(0), b_t.size(1));
  if (trans_a && trans_b) {
    gemm_into(a.transpose(), b.transpose(), alpha, beta, c);
  } else if (trans_a) {
    gemm_into(a.transpose(), b, alpha, beta, c);
  } else if (trans_b) {
    gemm_into(a, b.transpose(), alpha, beta, c);
  } else {
    gemm_into(a, b, alpha, beta, c);
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b,
          double beta, Tensor& c) {
  dispatch_floating(a.dtype(), "gemm", [&](auto zero) {
    using T = decltype(zero);
    gemm_typed<T>(trans_a, trans_b, static_cast<T>(alpha), a, b, static_cast<T>(beta), c);
  });
}

}  // namespace pipewright::cpu
