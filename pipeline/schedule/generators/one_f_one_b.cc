#include "pipeline/schedule/generators/one_f_one_b.h"

#include <algorithm>

#include "pipeline/schedule/generators/builder.h"

namespace pipewright::pipeline {

Schedule one_f_one_b(int p, int m) {
  Schedule s = detail::empty_schedule("1f1b", p, m);
  for (int stage = 0; stage < p; ++stage) {
    // Forwards that run before the first backward can: the gradient of micro-batch 0 needs
    // p-stage-1 more forwards downstream, which this stage fills with its own.
    const int warmup = std::min(p - stage - 1, m);
    int next_f = 0;
    int next_b = 0;
    for (; next_f < warmup; ++next_f) detail::emit(s, stage, stage, ActionKind::kForward, next_f);
    while (next_f < m) {  // steady state: one forward, one backward
      detail::emit(s, stage, stage, ActionKind::kForward, next_f++);
      detail::emit(s, stage, stage, ActionKind::kBackward, next_b++);
    }
    while (next_b < m) detail::emit(s, stage, stage, ActionKind::kBackward, next_b++);  // cool-down
  }
  return s;
}

}  // namespace pipewright::pipeline
