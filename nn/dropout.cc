// Dropout (see dropout.h).
#include "nn/dropout.h"

#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "autograd/dropout.h"
#include "nn/random_key.h"
#include "tensor/generator.h"
#include "tensor/graph.h"

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
    if (DeviceGraph* graph = DeviceGraph::capturing_on(x.device())) {
      // Note [Per-replay scalars]: replay k (0: the captured step's own launch) draws the
      // mask of step key.step + k, as the eager steps would (the Pipe advances its key's step
      // by one per step).
      auto replays = std::make_shared<uint64_t>(0);
      void* slot = graph->scalar_slot(
          x.device(), sizeof(uint64_t),
          [draw, replays](void* bytes) {
            *static_cast<uint64_t*>(bytes) = keyed_seed(draw, draw.key.step + *replays);
          },
          [replays] { ++*replays; });
      return autograd::dropout(x, p_, draw.seed, draw.offset, slot);
    }
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
