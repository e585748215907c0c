// Generator: Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3",
// SC'11), counter-based, with state (seed, offset).
//
// Stream layout (identical on every device, so CPU and CUDA produce the same bits):
//   key     = (lo32(seed), hi32(seed))
//   counter = (lo32(c), hi32(c), 0, 0) for block c = offset/4 + k, k = 0, 1, ...
//   each block yields 4 uint32 values; element i of a fill uses value u = (offset + i),
//   whatever the dtype (so a fill of n elements needs reserve(n)).
//   uniform float32: (u >> 8) * 2^-24 in [0, 1); float64: u * 2^-32 in [0, 1) (32 random bits).
//   uniform(lo, hi) = fma(hi - lo, U, lo) in double, then rounded to the dtype.
//   normal: Box-Muller on pairs (2 values per 2 elements): elements 2j and 2j+1 use values
//   offset+2j (radius) and offset+2j+1 (angle); an odd last element keeps the cosine half.
//   dropout: element i is kept when its uniform of the tensor's dtype is >= p.
// The per-element math lives in tensor/philox.h, shared with the CUDA kernels.
// A fill of n elements advances the offset by a whole number of 4-value blocks covering it, so
// replaying from a saved (seed, offset) reproduces the same numbers exactly: that is how
// recompute reproduces dropout masks.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/tensor.h"

namespace pipewright {

/// One Philox4x32-10 block: 10 rounds over `counter` with `key`. Matches the Random123
/// known-answer vectors.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}

  uint64_t seed() const { return seed_; }
  /// Position in the stream, in 32-bit values; always a multiple of 4.
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }

  /// Reserves `n` values of the stream and returns the offset where they start (advances
  /// offset by n rounded up to a multiple of 4). Used by kernels and Dropout.
  uint64_t reserve(uint64_t n);

  /// Fills `t` (contiguous float32/float64, any device) with U[lo, hi) / N(mean, std); advances
  /// the offset. Throws std::invalid_argument naming dtype and shape for any other tensor.
  void uniform_(Tensor& t, double lo = 0.0, double hi = 1.0);
  void normal_(Tensor& t, double mean = 0.0, double std = 1.0);

  /// A uniformly random permutation of [0, n) (int64 [n] on `device`; PyTorch's
  /// torch.randperm(n, generator=, device=)), Fisher-Yates driven by this stream: the same
  /// permutation on every device. Drawn on the host (a CPU device: in place, allocated from
  /// that device's allocator alone; a CUDA device: on cpu:0, then copied). Throws
  /// std::invalid_argument naming n when n < 0.
  Tensor randperm(int64_t n, Device device = Device::cpu(0));

 private:
  uint64_t seed_;
  uint64_t offset_;
};

/// The process-wide default generator (seeded 0); not thread-safe: give each thread its own
/// Generator when several threads draw numbers.
Generator& default_generator();

/// The calling thread's current generator: the one installed by the innermost live
/// GeneratorGuard on this thread, else default_generator(). Random modules (Dropout) draw
/// from it, so a pipeline worker can give each cell a replayable stream.
Generator& current_generator();

/// Installs `generator` as this thread's current generator for the guard's lifetime.
class GeneratorGuard {
 public:
  explicit GeneratorGuard(Generator& generator);
  ~GeneratorGuard();
  GeneratorGuard(const GeneratorGuard&) = delete;
  GeneratorGuard& operator=(const GeneratorGuard&) = delete;

 private:
  Generator* previous_;
};

}  // namespace pipewright
