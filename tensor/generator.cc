#include "tensor/generator.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "tensor/kernels.h"
#include "tensor/philox.h"

namespace pipewright {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) {
  const philox::Block out = philox::philox4x32_10(
      philox::Block{{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
  return {out.v[0], out.v[1], out.v[2], out.v[3]};
}

uint64_t Generator::reserve(uint64_t n) {
  const uint64_t start = offset_;
  offset_ += (n + 3) / 4 * 4;
  return start;
}

namespace {

void check_fillable(const char* what, const Tensor& t) {
  if (!is_floating(t.dtype()) || !t.is_contiguous()) {
    throw std::invalid_argument(std::string("Generator::") + what +
                                ": expected a contiguous float32 or float64 tensor, got " +
                                (t.is_contiguous() ? "" : "non-contiguous ") +
                                dtype_name(t.dtype()) + " " + t.shape().str());
  }
}

}  // namespace

void Generator::uniform_(Tensor& t, double lo, double hi) {
  check_fillable("uniform_", t);
  const uint64_t start = reserve(static_cast<uint64_t>(t.numel()));
  PW_KERNEL(t.device(), philox_uniform)(seed_, start, lo, hi, t);
}

void Generator::normal_(Tensor& t, double mean, double std) {
  check_fillable("normal_", t);
  const uint64_t start = reserve(static_cast<uint64_t>(t.numel()));
  PW_KERNEL(t.device(), philox_normal)(seed_, start, mean, std, t);
}

// Fisher-Yates from the last position down: position i swaps with j uniform in [0, i], j from
// two stream values (64 bits) modulo i+1 (bias below 2^-40 for any n that fits in memory).
Tensor Generator::randperm(int64_t n, Device device) {
  if (n < 0) throw std::invalid_argument("randperm: n must be >= 0, got " + std::to_string(n));
  if (device.type != DeviceType::kCPU) return randperm(n, Device::cpu(0)).to(device);
  Tensor perm = Tensor::arange(n, {DType::kInt64, device});
  int64_t* p = perm.data<int64_t>();
  const uint64_t swaps = n > 1 ? static_cast<uint64_t>(n - 1) : 0;
  philox::Cursor cursor(seed_, reserve(2 * swaps));
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t hi = cursor.next();
    const uint64_t r = (hi << 32) | cursor.next();
    const auto j = static_cast<int64_t>(r % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return perm;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

}  // namespace pipewright
