// Keyed randomness (Note [Keyed randomness], random_key.h): a per-thread key, the layer that
// runs, and its draw count.
#include "nn/random_key.h"

#include <stdexcept>
#include <string>

namespace pipewright::nn {
namespace {

struct KeyState {
  bool active = false;
  RandomKey key;
  int64_t layer = 0;   // the top-level child that runs now
  uint32_t draw = 0;   // keyed draws it made so far in this forward
  int depth = 0;       // open LayerScopes
};

thread_local KeyState state;

// SplitMix64's finaliser over a running hash: distinct, well-mixed Philox keys for distinct
// (seed, step, layer, draw).
uint64_t mix(uint64_t h, uint64_t value) {
  uint64_t z = h ^ (value + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

RandomKeyGuard::RandomKeyGuard(const RandomKey& key)
    : active_(state.active), key_(state.key), layer_(state.layer), draw_(state.draw),
      depth_(state.depth) {
  if (key.first_sample < 0) {
    throw std::invalid_argument("RandomKey: first_sample must be >= 0, got " +
                                std::to_string(key.first_sample));
  }
  state = KeyState{.active = true, .key = key};
}

RandomKeyGuard::~RandomKeyGuard() {
  state = KeyState{.active = active_, .key = key_, .layer = layer_, .draw = draw_,
                   .depth = depth_};
}

bool random_key_active() { return state.active; }

LayerScope::LayerScope(int64_t layer) : active_(state.active) {
  if (!active_) return;
  outermost_ = state.depth == 0;
  ++state.depth;
  if (!outermost_) return;
  previous_layer_ = state.layer;
  previous_draw_ = state.draw;
  state.layer = layer;
  state.draw = 0;
}

LayerScope::~LayerScope() {
  if (!active_) return;
  --state.depth;
  if (!outermost_) return;
  state.layer = previous_layer_;
  state.draw = previous_draw_;
}

KeyedDraw next_keyed_draw(const Tensor& x) {
  if (!state.active) throw std::logic_error("next_keyed_draw outside a RandomKeyGuard");
  const RandomKey& key = state.key;
  KeyedDraw d;
  d.key = key;
  d.layer = state.layer;
  d.draw = state.draw++;
  d.seed = keyed_seed(d, key.step);
  const int64_t rows = x.dim() == 0 ? 1 : x.size(0);
  const uint64_t per_row = rows > 0 ? static_cast<uint64_t>(x.numel() / rows) : 0;
  d.offset = static_cast<uint64_t>(key.first_sample) * per_row;
  return d;
}

uint64_t keyed_seed(const KeyedDraw& draw, uint64_t step) {
  uint64_t h = mix(draw.key.seed, step);
  h = mix(h, static_cast<uint64_t>(draw.layer));
  return mix(h, draw.draw);
}

}  // namespace pipewright::nn
