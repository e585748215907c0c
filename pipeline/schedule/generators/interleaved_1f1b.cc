#include "pipeline/schedule/generators/interleaved_1f1b.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "pipeline/schedule/generators/builder.h"

namespace pipewright::pipeline {
namespace {

// The k-th forward (backward) a worker runs, as (virtual stage, micro-batch). Micro-batches go in
// groups of p; within a group the worker walks its virtual stages upward for forwards and downward
// for backwards:
//
//   k          0  1  2  3  4  5  6  7      (p = 2, v = 2, m = 4)
//   fwd vstage 0  0  1  1  0  0  1  1
//   bwd vstage 1  1  0  0  1  1  0  0
//   mb         0  1  0  1  2  3  2  3
struct Slot {
  int vstage;
  int microbatch;
};

Slot slot(int k, int p, int v, bool forward) {
  const int in_group = k % (p * v);
  int vstage = in_group / p;
  if (!forward) vstage = v - 1 - vstage;
  return Slot{vstage, (k / (p * v)) * p + k % p};
}

}  // namespace

Schedule interleaved_1f1b(int p, int m, int v) {
  Schedule s = detail::empty_schedule("interleaved-1f1b", p, m, v);
  if (m % p != 0) {
    throw std::invalid_argument("interleaved-1f1b: the number of micro-batches m = " +
                                std::to_string(m) + " must be a multiple of the number of workers p = " +
                                std::to_string(p));
  }
  const int total = m * v;  // forwards (and backwards) per worker
  for (int w = 0; w < p; ++w) {
    // Megatron-LM's warm-up: enough forwards that the first backward's gradient has come
    // back by the time the warm-up ends; everything when m == p.
    const int warmup = m == p ? total : std::min((p - w - 1) * 2 + (v - 1) * p, total);
    auto forward = [&](int k) {
      const Slot x = slot(k, p, v, true);
      detail::emit(s, w, x.vstage * p + w, ActionKind::kForward, x.microbatch);
    };
    auto backward = [&](int k) {
      const Slot x = slot(k, p, v, false);
      detail::emit(s, w, x.vstage * p + w, ActionKind::kBackward, x.microbatch);
    };
    int next_f = 0;
    int next_b = 0;
    for (; next_f < warmup; ++next_f) forward(next_f);
    while (next_f < total) {
      forward(next_f++);
      backward(next_b++);
    }
    while (next_b < total) backward(next_b++);
  }
  return s;
}

}  // namespace pipewright::pipeline
