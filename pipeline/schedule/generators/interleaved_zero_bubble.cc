#include "pipeline/schedule/generators/interleaved_zero_bubble.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/schedule/generators/builder.h"

namespace pipewright::pipeline {

Schedule interleaved_zero_bubble(int p, int m, int v) {
  Schedule s = detail::empty_schedule("interleaved-zb", p, m, v);
  const int rounds = std::max(1, m / p);
  if (m % rounds != 0) {
    throw std::invalid_argument("interleaved-zb: the number of micro-batches m = " +
                                std::to_string(m) + " must be a multiple of max(1, m / p) = " +
                                std::to_string(rounds));
  }
  const int per_round = m / rounds;
  const int total = m * v;  // forwards (and I's, and W's) per worker
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min((v - 1) * per_round + p - 1 - r, total);
    auto forward_stage = [&](int k) { return ((k / per_round) % v) * p + r; };
    auto backward_stage = [&](int k) {
      return (v - 1 - ((k - warmup) / per_round) % v) * p + r;
    };
    std::vector<int> next_f(static_cast<size_t>(p * v), 0), next_i(next_f);
    std::deque<std::pair<int, int>> owed_w;  // (stage, micro-batch) of I's without their W
    auto f = [&](int stage) {
      detail::emit(s, r, stage, ActionKind::kForward, next_f[static_cast<size_t>(stage)]++);
    };
    auto i = [&](int stage) {
      const int j = next_i[static_cast<size_t>(stage)]++;
      detail::emit(s, r, stage, ActionKind::kBackwardInput, j);
      owed_w.emplace_back(stage, j);
    };
    auto w = [&] {
      detail::emit(s, r, owed_w.front().first, ActionKind::kBackwardWeight, owed_w.front().second);
      owed_w.pop_front();
    };
    int k = 0;
    for (; k < warmup; ++k) f(forward_stage(k));
    for (; k < total; ++k) {  // one forward, one I, and a W once r I's are owed
      f(forward_stage(k));
      i(backward_stage(k));
      if (k - warmup >= r) w();
    }
    for (; k < total + warmup; ++k) {  // cool-down: the remaining I's
      i(backward_stage(k));
      if (k - warmup >= r) w();
    }
    while (!owed_w.empty()) w();
  }
  return s;
}

}  // namespace pipewright::pipeline
