// Dropout (see dropout.h).
#include "nn/dropout.h"

#include <sstream>
#include <stdexcept>

#include "autograd/dropout.h"
#include "nn/random_key.h"
#include "tensor/generator.h"

namespace pipewright::nn {

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0.0 && p < 1.0)) {
    throw std::invalid_argument("Dropout: p must be in [0, 1), got " + std::to_string(p));
  }
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0.0) return x;
  if (random_key_active()) {
    const KeyedDraw draw = next_keyed_draw(x);
    return autograd::dropout(x, p_, draw.seed, draw.offset);
  }
  Generator& generator = current_generator();
  const uint64_t offset = generator.reserve(autograd::dropout_stream_length(x));
  return autograd::dropout(x, p_, generator.seed(), offset);
}

std::string Dropout::str() const {
  std::ostringstream os;
  os << "Dropout(p=" << p_ << ")";
  return os.str();
}

}  // namespace pipewright::nn
