// MLP and TransformerBlock (see transformer.h).
#include "nn/transformer.h"

#include <sstream>
#include <stdexcept>

#include "autograd/elementwise.h"

namespace pipewright::nn {

MLP::MLP(int64_t dim, int64_t hidden, double dropout, bool bias, const std::string& approximate,
         TensorOptions options)
    : dim_(dim), hidden_(hidden) {
  c_fc_ = register_module("c_fc", std::make_shared<Linear>(dim, hidden, bias, options));
  gelu_ = register_module("gelu", std::make_shared<GELU>(approximate));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(hidden, dim, bias, options));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor MLP::forward(const Tensor& x) {
  return dropout_->forward(c_proj_->forward(gelu_->forward(c_fc_->forward(x))));
}

std::string MLP::str() const {
  std::ostringstream os;
  os << "MLP(dim=" << dim_ << ", hidden=" << hidden_ << ", dropout=" << dropout_->p()
     << ", gelu='" << gelu_->approximate() << "')";
  return os.str();
}

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, TransformerBlockOptions block,
                                   TensorOptions options)
    : dim_(dim), heads_(heads), options_(block) {
  if (block.mlp_ratio <= 0) {
    throw std::invalid_argument("TransformerBlock: mlp_ratio must be positive, got " +
                                std::to_string(block.mlp_ratio));
  }
  auto layer_norm = [&] {
    return std::make_shared<LayerNorm>(dim, block.eps, /*elementwise_affine=*/true, block.bias,
                                       options);
  };
  const AttentionOptions attention{.dropout = block.dropout, .bias = block.bias,
                                   .kernel = block.kernel};
  ln_1_ = register_module("ln_1", layer_norm());
  attn_ = register_module("attn",
                          std::make_shared<CausalSelfAttention>(dim, heads, attention, options));
  ln_2_ = register_module("ln_2", layer_norm());
  mlp_ = register_module("mlp", std::make_shared<MLP>(dim, block.mlp_ratio * dim, block.dropout,
                                                      block.bias, block.approximate, options));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  if (!x.defined() || x.dim() != 3 || x.size(2) != dim_) {
    throw std::invalid_argument(str() + ": input has shape " +
                                (x.defined() ? x.shape().str() : std::string("(undefined)")) +
                                ", expected [B, T, " + std::to_string(dim_) + "]");
  }
  const Tensor h = autograd::add(x, attn_->forward(ln_1_->forward(x)));
  return autograd::add(h, mlp_->forward(ln_2_->forward(h)));
}

std::string TransformerBlock::str() const {
  std::ostringstream os;
  os << "TransformerBlock(dim=" << dim_ << ", heads=" << heads_ << ", dropout=" << options_.dropout
     << ", mlp_ratio=" << options_.mlp_ratio << ")";
  return os.str();
}

}  // namespace pipewright::nn
