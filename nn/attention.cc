// CausalSelfAttention (see attention.h).
//
// Shape legend: B = batch, T = sequence, C = model dim, H = heads, D = C / H.
#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "autograd/attention.h"
#include "autograd/batched_matmul.h"
#include "autograd/elementwise.h"
#include "autograd/masking.h"
#include "autograd/shape_ops.h"
#include "autograd/softmax.h"
#include "autograd/views.h"
#include "tensor/masking.h"

namespace pipewright::nn {

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, AttentionOptions attention,
                                         TensorOptions options)
    : dim_(dim), heads_(heads), options_(attention) {
  if (dim <= 0 || heads <= 0 || dim % heads != 0) {
    throw std::invalid_argument("CausalSelfAttention: dim must be a positive multiple of heads, "
                                "got dim " + std::to_string(dim) + ", heads " +
                                std::to_string(heads));
  }
  c_attn_ = register_module("c_attn",
                            std::make_shared<Linear>(dim, 3 * dim, attention.bias, options));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(dim, dim, attention.bias, options));
  attn_dropout_ = register_module("attn_dropout", std::make_shared<Dropout>(attention.dropout));
  resid_dropout_ = register_module("resid_dropout", std::make_shared<Dropout>(attention.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  if (!x.defined() || x.dim() != 3 || x.size(2) != dim_) {
    throw std::invalid_argument(str() + ": input has shape " +
                                (x.defined() ? x.shape().str() : std::string("(undefined)")) +
                                ", expected [B, T, " + std::to_string(dim_) + "]");
  }
  namespace ag = autograd;
  const int64_t b = x.size(0), t = x.size(1), d = dim_ / heads_;
  // [B, T, 3C] -> [B, T, 3, H, D] -> [3, B, H, T, D]: q, k, v each a contiguous [B, H, T, D].
  Tensor qkv = ag::reshape(c_attn_->forward(x), Shape{b, t, 3, heads_, d});
  qkv = ag::contiguous(ag::permute(qkv, {2, 0, 3, 1, 4}));
  std::vector<Tensor> parts = ag::chunk(qkv, 3);
  const Shape heads_shape{b, heads_, t, d};
  const Tensor q = ag::reshape(parts[0], heads_shape), k = ag::reshape(parts[1], heads_shape),
               v = ag::reshape(parts[2], heads_shape);

  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const bool weights_dropout = attn_dropout_->is_training() && attn_dropout_->p() > 0.0;
  Tensor y;
  if (options_.kernel == AttentionKernel::kFlash && !weights_dropout) {
    y = ag::scaled_dot_product_attention(q, k, v, /*causal=*/true, scale);  // [B, H, T, D]
  } else {
    y = ag::batched_matmul(attn_dropout_->forward(attention_weights(q, k, scale)), v);
  }
  y = ag::reshape(ag::contiguous(ag::transpose(y, 1, 2)), Shape{b, t, dim_});
  return resid_dropout_->forward(c_proj_->forward(y));
}

Tensor CausalSelfAttention::attention_weights(const Tensor& q, const Tensor& k,
                                              double scale) const {
  namespace ag = autograd;
  Tensor scores = ag::batched_matmul(q, k, false, /*trans_b=*/true);  // [B, H, T, T]
  if (options_.kernel == AttentionKernel::kReference) {
    const int64_t t = q.size(2);
    const Tensor mask = ops::causal_mask(t, t, {scores.dtype(), scores.device()});
    return ag::softmax(ag::masked_fill(ag::mul(scores, scale), mask,
                                       -std::numeric_limits<double>::infinity()));
  }
  return ag::causal_softmax(scores, scale);
}

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kFlash: return "flash";
    case AttentionKernel::kFused: return "fused";
    case AttentionKernel::kReference: return "reference";
  }
  return "?";
}

AttentionKernel attention_kernel_from_name(const std::string& name) {
  for (AttentionKernel k :
       {AttentionKernel::kFlash, AttentionKernel::kFused, AttentionKernel::kReference}) {
    if (name == attention_kernel_name(k)) return k;
  }
  throw std::invalid_argument("attention kernel '" + name +
                              "': expected flash, fused or reference");
}

std::string CausalSelfAttention::str() const {
  std::ostringstream os;
  os << "CausalSelfAttention(dim=" << dim_ << ", heads=" << heads_
     << ", dropout=" << options_.dropout << ", bias=" << (options_.bias ? "true" : "false") << ")";
  return os.str();
}

}  // namespace pipewright::nn
