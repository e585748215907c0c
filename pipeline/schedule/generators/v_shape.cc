#include "pipeline/schedule/generators/v_shape.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>

#include "pipeline/schedule/generators/builder.h"

namespace pipewright::pipeline {
namespace {

/// A V-shaped schedule under construction, one worker at a time: per-virtual-stage counters of the
/// next F, I/B and W micro-batch, and the FIFO of I's whose W is owed.
class VWorker {
 public:
  VWorker(Schedule& s, int p, int r) : s_(s), r_(r), stage_{r, 2 * p - 1 - r} {}

  int forwards(int c) const { return next_f_[c]; }
  void f(int c) { emit(c, ActionKind::kForward, next_f_[c]++); }
  void b(int c) { emit(c, ActionKind::kBackward, next_b_[c]++); }
  void i(int c) {
    owed_.emplace_back(c, next_b_[c]);
    emit(c, ActionKind::kBackwardInput, next_b_[c]++);
  }
  /// The W of virtual stage c's oldest I (ZB-V pays W's per virtual stage in order).
  void w(int c) { emit(c, ActionKind::kBackwardWeight, next_w_[c]++); }
  /// The W of the oldest I of either virtual stage (DualPipeV's queue).
  void w_oldest() {
    const auto [c, j] = owed_.front();
    owed_.pop_front();
    emit(c, ActionKind::kBackwardWeight, j);
  }
  bool owes_w(int c) const { return next_w_[c] < next_b_[c]; }

 private:
  void emit(int c, ActionKind kind, int j) {
    if (j < s_.num_microbatches) detail::emit(s_, r_, stage_[c], kind, j);
  }

  Schedule& s_;
  int r_;
  int stage_[2];
  int next_f_[2] = {0, 0};
  int next_b_[2] = {0, 0};
  int next_w_[2] = {0, 0};
  std::deque<std::pair<int, int>> owed_;
};

Schedule v_schedule(const std::string& name, int p, int m) {
  Schedule s = detail::empty_schedule(name, p, m, 2);
  s.stage_worker = v_placement(p);
  return s;
}

}  // namespace

Schedule zb_v(int p, int m) {
  Schedule s = v_schedule("zb-v", p, m);
  const int n = std::max(2 * p - 1, m);  // the order is built for n micro-batches
  for (int r = 0; r < p; ++r) {
    VWorker x(s, p, r);
    for (int k = 0; k < 2 * (p - r) - 1; ++k) x.f(0);
    for (int k = 0; k < r; ++k) {
      x.f(1);
      x.f(0);
    }
    for (int k = 0; k < p - r; ++k) {
      x.f(1);
      x.i(1);
      x.w(1);
    }
    while (x.forwards(1) < x.forwards(0) || x.forwards(0) < n) {
      if (x.forwards(0) < n) x.f(0);
      x.i(0);
      x.w(0);
      x.f(1);
      x.i(1);
      x.w(1);
    }
    for (int k = 0; k < r; ++k) {
      x.i(0);
      x.i(1);
    }
    for (int k = 0; k < p - r; ++k) {
      x.i(0);
      x.w(0);
    }
    while (x.owes_w(1)) x.w(1);
    while (x.owes_w(0)) x.w(0);
  }
  return s;
}

Schedule dualpipev(int p, int m) {
  Schedule s = v_schedule("dualpipev", p, m);
  if (m < 2 * p) {
    throw std::invalid_argument("dualpipev: needs at least 2p = " + std::to_string(2 * p) +
                                " micro-batches (got m = " + std::to_string(m) + ")");
  }
  for (int r = 0; r < p; ++r) {
    VWorker x(s, p, r);
    for (int k = 0; k < 2 * (p - r - 1); ++k) x.f(0);  // 1
    for (int k = 0; k <= r; ++k) {                     // 2
      x.f(0);
      x.f(1);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 3
      x.i(1);
      x.w_oldest();
      x.f(1);
    }
    for (int k = 0; k < m - 2 * p + r + 1; ++k) {  // 4
      x.f(0);
      x.b(1);
      x.f(1);
      x.b(0);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 5
      x.b(1);
      x.f(1);
      x.b(0);
    }
    bool split = false;  // 6
    for (int k = 0; k <= r; ++k) {
      if (k == (r + 1) / 2 && r % 2 == 1) split = true;
      split ? x.i(1) : x.b(1);
      if (k == (r + 1) / 2 && r % 2 == 0) split = true;
      split ? x.i(0) : x.b(0);
    }
    for (int k = 0; k < p - r - 1; ++k) {  // 7
      x.w_oldest();
      x.i(0);
    }
    for (int k = 0; k <= r; ++k) x.w_oldest();  // 8
  }
  return s;
}

}  // namespace pipewright::pipeline
