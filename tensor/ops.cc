// Tensor ops: validate, make inputs contiguous, allocate the result, call the device's kernel.
#include "tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tensor/op_checks.h"

namespace pipewright::ops {
namespace {

// The checks every op file shares (tensor/op_checks.h).
using detail::check_defined;
using detail::check_floating;
using detail::check_same_shape;
using detail::describe;
using detail::empty_like;
/// Same device and dtype, else std::invalid_argument naming both operands.
constexpr auto check_same_device_dtype = detail::check_like;

// ---- elementwise ----

/// True when `small` broadcasts over `big`: one element (and no higher rank than big), or
/// equal to big's trailing dims (which includes equal shapes).
bool broadcasts_over(const Shape& small, const Shape& big) {
  if (small.numel() == 1 && small.rank() <= big.rank()) return true;
  if (small.rank() > big.rank()) return false;
  return std::equal(small.dims().begin(), small.dims().end(),
                    big.dims().end() - small.rank());
}

/// The same operation with its operands swapped: a op b == b swapped(op) a.
BinaryOp swapped(BinaryOp op) {
  switch (op) {
    case BinaryOp::kSub: return BinaryOp::kRSub;
    case BinaryOp::kDiv: return BinaryOp::kRDiv;
    case BinaryOp::kRSub: return BinaryOp::kSub;
    case BinaryOp::kRDiv: return BinaryOp::kDiv;
    default: return op;  // add, mul commute
  }
}

Tensor binary(const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same_device_dtype(name, a, b);
  check_floating(name, a);
  if (!broadcasts_over(b.shape(), a.shape())) {
    if (!broadcasts_over(a.shape(), b.shape())) {
      throw std::invalid_argument(std::string(name) + ": cannot broadcast " + b.shape().str() +
                                  " against " + a.shape().str() + " (" + describe(a) + " vs " +
                                  describe(b) + ")");
    }
    return binary(name, swapped(op), b, a);  // the kernel broadcasts its second operand
  }
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = empty_like(ac);
  PW_KERNEL(a.device(), binary)(op, ac, bc, out);
  return out;
}

Tensor binary_scalar(const char* name, BinaryOp op, const Tensor& a, double s) {
  check_floating(name, a);
  const Tensor ac = a.contiguous();
  Tensor out = empty_like(ac);
  PW_KERNEL(a.device(), binary_scalar)(op, ac, s, out);
  return out;
}

Tensor unary(const char* name, UnaryOp op, const Tensor& x) {
  check_floating(name, x);
  const Tensor xc = x.contiguous();
  Tensor out = empty_like(xc);
  PW_KERNEL(x.device(), unary)(op, xc, out);
  return out;
}

void check_contiguous_destination(const char* op, const Tensor& dst) {
  check_defined(op, dst);
  if (!dst.is_contiguous()) {
    throw std::invalid_argument(std::string(op) + ": destination " + describe(dst) +
                                " is not contiguous");
  }
}

// ---- reductions ----

/// x viewed as [outer, n, inner] around dimension `dim`.
struct ReduceLayout {
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;
};

ReduceLayout reduce_layout(const Tensor& x, int64_t dim, bool keepdim) {
  const int64_t d = x.shape().wrap_dim(dim);
  ReduceLayout layout;
  std::vector<int64_t> out_dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < d) layout.outer *= x.size(i);
    if (i > d) layout.inner *= x.size(i);
    if (i != d || keepdim) out_dims.push_back(i == d ? 1 : x.size(i));
  }
  layout.n = x.size(d);
  layout.out_shape = Shape(std::move(out_dims));
  return layout;
}

Tensor reduce_dim(const char* name, ReduceOp op, const Tensor& x, int64_t dim, bool keepdim) {
  check_floating(name, x);
  const ReduceLayout layout = reduce_layout(x, dim, keepdim);
  if (op == ReduceOp::kMax && layout.n == 0) {
    throw std::invalid_argument(std::string(name) + ": cannot reduce empty dim " +
                                std::to_string(dim) + " of " + describe(x));
  }
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(layout.out_shape, {x.dtype(), x.device()});
  PW_KERNEL(x.device(), reduce)(op, xc, layout.outer, layout.n, layout.inner, out);
  return out;
}

Tensor reduce_all(const char* name, ReduceOp op, const Tensor& x) {
  check_floating(name, x);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(Shape{}, {x.dtype(), x.device()});
  PW_KERNEL(x.device(), reduce)(op, xc, 1, x.numel(), 1, out);
  return out;
}

/// [M, N] of op(a)·op(b), checking ranks and inner sizes.
Shape matmul_shape(const char* name, const Tensor& a, const Tensor& b, bool trans_a,
                   bool trans_b) {
  check_same_device_dtype(name, a, b);
  check_floating(name, a);
  auto flags = [&] {
    return std::string(" (trans_a=") + (trans_a ? "true" : "false") +
           ", trans_b=" + (trans_b ? "true" : "false") + ")";
  };
  if (a.dim() != 2 || b.dim() != 2) {
    throw std::invalid_argument(std::string(name) + ": expected 2-D operands, got " +
                                describe(a) + " and " + describe(b));
  }
  const int64_t m = trans_a ? a.size(1) : a.size(0), k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0), n = trans_b ? b.size(0) : b.size(1);
  if (k != kb) {
    throw std::invalid_argument(std::string(name) + ": inner sizes differ: " + a.shape().str() +
                                " · " + b.shape().str() + flags() + " gives " +
                                std::to_string(k) + " vs " + std::to_string(kb));
  }
  return Shape{m, n};
}

}  // namespace

// ---- elementwise ----

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", BinaryOp::kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", BinaryOp::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", BinaryOp::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", BinaryOp::kDiv, a, b); }
Tensor add(const Tensor& a, double s) { return binary_scalar("add", BinaryOp::kAdd, a, s); }
Tensor sub(const Tensor& a, double s) { return binary_scalar("sub", BinaryOp::kSub, a, s); }
Tensor mul(const Tensor& a, double s) { return binary_scalar("mul", BinaryOp::kMul, a, s); }
Tensor div(const Tensor& a, double s) { return binary_scalar("div", BinaryOp::kDiv, a, s); }
Tensor rsub(const Tensor& a, double s) { return binary_scalar("rsub", BinaryOp::kRSub, a, s); }
Tensor rdiv(const Tensor& a, double s) { return binary_scalar("rdiv", BinaryOp::kRDiv, a, s); }

Tensor neg(const Tensor& x) { return unary("neg", UnaryOp::kNeg, x); }
Tensor exp(const Tensor& x) { return unary("exp", UnaryOp::kExp, x); }
Tensor log(const Tensor& x) { return unary("log", UnaryOp::kLog, x); }
Tensor sqrt(const Tensor& x) { return unary("sqrt", UnaryOp::kSqrt, x); }
Tensor square(const Tensor& x) { return unary("square", UnaryOp::kSquare, x); }
Tensor abs(const Tensor& x) { return unary("abs", UnaryOp::kAbs, x); }
Tensor tanh(const Tensor& x) { return unary("tanh", UnaryOp::kTanh, x); }
Tensor sigmoid(const Tensor& x) { return unary("sigmoid", UnaryOp::kSigmoid, x); }
Tensor relu(const Tensor& x) { return unary("relu", UnaryOp::kRelu, x); }

Tensor relu_backward(const Tensor& grad, const Tensor& y) {
  check_same_device_dtype("relu_backward", grad, y);
  check_floating("relu_backward", grad);
  check_same_shape("relu_backward", grad, y);
  const Tensor gc = grad.contiguous(), yc = y.contiguous();
  Tensor out = empty_like(gc);
  PW_KERNEL(grad.device(), relu_backward)(gc, yc, out);
  return out;
}

// ---- in place ----

void fill_(Tensor& dst, double value) {
  check_contiguous_destination("fill_", dst);
  PW_KERNEL(dst.device(), fill)(dst, value);
}

void add_(Tensor& dst, const Tensor& src, double alpha) {
  check_contiguous_destination("add_", dst);
  check_same_device_dtype("add_", dst, src);
  check_floating("add_", dst);
  if (dst.numel() != src.numel()) {
    throw std::invalid_argument("add_: element counts differ: " + describe(dst) + " vs " +
                                describe(src));
  }
  PW_KERNEL(dst.device(), axpy)(alpha, src.contiguous(), dst);
}

void mul_(Tensor& dst, double s) {
  check_contiguous_destination("mul_", dst);
  check_floating("mul_", dst);
  PW_KERNEL(dst.device(), binary_scalar)(BinaryOp::kMul, dst, s, dst);
}

void mul_(Tensor& dst, const Tensor& b) {
  check_contiguous_destination("mul_", dst);
  check_same_device_dtype("mul_", dst, b);
  check_floating("mul_", dst);
  if (!broadcasts_over(b.shape(), dst.shape())) {
    throw std::invalid_argument("mul_: cannot broadcast " + b.shape().str() + " over the "
                                "destination " + describe(dst));
  }
  PW_KERNEL(dst.device(), binary)(BinaryOp::kMul, dst, b.contiguous(), dst);
}

// ---- reductions ----

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim("sum", ReduceOp::kSum, x, dim, keepdim);
}
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim("mean", ReduceOp::kMean, x, dim, keepdim);
}
Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim("max", ReduceOp::kMax, x, dim, keepdim);
}
Tensor sum(const Tensor& x) { return reduce_all("sum", ReduceOp::kSum, x); }
Tensor mean(const Tensor& x) { return reduce_all("mean", ReduceOp::kMean, x); }

void add_norm_share_(Tensor& total, const Tensor& x, double p) {
  check_defined("add_norm_share_", x);
  if (x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64) {
    throw std::invalid_argument("add_norm_share_: x must be float32 or float64, got " +
                                describe(x));
  }
  if (p != 1.0 && p != 2.0) {
    throw std::invalid_argument("add_norm_share_: p must be 1 or 2, got " + std::to_string(p));
  }
  check_defined("add_norm_share_", total);
  if (total.dtype() != DType::kFloat64 || total.numel() != 1 || total.device() != x.device() ||
      !total.is_contiguous()) {
    throw std::invalid_argument("add_norm_share_: total must be float64 with one element on " +
                                x.device().str() + ", got " + describe(total));
  }
  PW_KERNEL(x.device(), norm_share_add)(p == 2.0 ? UnaryOp::kSquare : UnaryOp::kAbs,
                                        x.contiguous(), total);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  check_floating("argmax", x);
  const ReduceLayout layout = reduce_layout(x, dim, keepdim);
  if (layout.n == 0) {
    throw std::invalid_argument("argmax: cannot reduce empty dim " + std::to_string(dim) +
                                " of " + describe(x));
  }
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(layout.out_shape, {DType::kInt64, x.device()});
  PW_KERNEL(x.device(), argmax)(xc, layout.outer, layout.n, layout.inner, out);
  return out;
}

// ---- linear algebra ----

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  Tensor c = Tensor::empty(matmul_shape("matmul", a, b, trans_a, trans_b),
                           {gemm_result_dtype(a.dtype()), a.device()});
  PW_KERNEL(a.device(), gemm)(trans_a, trans_b, 1.0, a.contiguous(), b.contiguous(), 0.0, c);
  return c;
}

Tensor matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, bool trans_a,
                   bool trans_b) {
  const Shape shape = matmul_shape("matmul_bias", a, b, trans_a, trans_b);
  const DType dtype = gemm_result_dtype(a.dtype());
  check_defined("matmul_bias", bias);
  if (bias.dim() != 1 || bias.size(0) != shape.dims()[1] || bias.dtype() != dtype ||
      bias.device() != a.device()) {
    throw std::invalid_argument("matmul_bias: bias is " + describe(bias) + "; expected [" +
                                std::to_string(shape.dims()[1]) + "] " + dtype_name(dtype) +
                                " on " + a.device().str());
  }
  Tensor c = Tensor::empty(shape, {dtype, a.device()});
  PW_KERNEL(a.device(), gemm_bias)(trans_a, trans_b, a.contiguous(), b.contiguous(),
                                   bias.contiguous(), c);
  return c;
}

void gemm_(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
           double alpha, double beta) {
  const Shape expected = matmul_shape("gemm_", a, b, trans_a, trans_b);
  check_contiguous_destination("gemm_", c);
  if (c.device() != a.device() || c.dtype() != gemm_result_dtype(a.dtype())) {
    throw std::invalid_argument("gemm_: c is " + describe(c) + " but the operands are " +
                                describe(a) + " (c takes their device, and float32 for " +
                                "16-bit operands)");
  }
  if (c.shape() != expected) {
    throw std::invalid_argument("gemm_: c is " + c.shape().str() + " but op(a)·op(b) of " +
                                a.shape().str() + " and " + b.shape().str() + " is " +
                                expected.str());
  }
  PW_KERNEL(a.device(), gemm)(trans_a, trans_b, alpha, a.contiguous(), b.contiguous(), beta, c);
}

// ---- softmax family ----

namespace {
Tensor softmax_impl(const char* name, const Tensor& x, bool log) {
  check_floating(name, x);
  if (x.dim() == 0) throw std::invalid_argument(std::string(name) + ": expected rank >= 1, got " +
                                                describe(x));
  const int64_t cols = x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const Tensor x2 = x.contiguous().reshape(Shape{rows, cols});
  Tensor out = Tensor::empty(x2.shape(), {x.dtype(), x.device()});
  PW_KERNEL(x.device(), softmax)(x2, log, out);
  return out.reshape(x.shape());
}
}  // namespace

Tensor softmax(const Tensor& x) { return softmax_impl("softmax", x, false); }
Tensor log_softmax(const Tensor& x) { return softmax_impl("log_softmax", x, true); }

// ---- indexing ----

Tensor index_select(const Tensor& src, const Tensor& index) {
  check_defined("index_select", src);
  check_defined("index_select", index);
  if (src.dim() == 0 || index.dim() != 1 || index.dtype() != DType::kInt64 ||
      index.device() != src.device()) {
    throw std::invalid_argument("index_select: expected src of rank >= 1 and a 1-D int64 index "
                                "on the same device, got src " + describe(src) + ", index " +
                                describe(index));
  }
  Shape out_shape = src.shape();
  out_shape.at(0) = index.size(0);
  Tensor out = Tensor::empty(out_shape, {src.dtype(), src.device()});
  PW_KERNEL(src.device(), index_select)(src.contiguous(), index.contiguous(), out);
  return out;
}

// ---- comparisons for tests ----

double max_abs_diff(const Tensor& a, const Tensor& b) {
  check_defined("max_abs_diff", a);
  check_defined("max_abs_diff", b);
  check_same_shape("max_abs_diff", a, b);
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::fabs(x[i] - y[i]);
    if (std::isnan(d)) return d;  // NaN anywhere makes the difference NaN
    worst = std::max(worst, d);
  }
  return worst;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_defined("allclose", a);
  check_defined("allclose", b);
  check_same_shape("allclose", a, b);
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;  // NaN: false
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined("equal", a);
  check_defined("equal", b);
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.to(Device::cpu(0)).contiguous(), y = b.to(Device::cpu(0)).contiguous();
  return x.nbytes() == 0 || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

}  // namespace pipewright::ops
