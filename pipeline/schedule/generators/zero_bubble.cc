#include "pipeline/schedule/generators/zero_bubble.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <stdexcept>
#include <vector>

#include "pipeline/schedule/generators/builder.h"

namespace pipewright::pipeline {

Schedule zb_h1(int p, int m) {
  Schedule s = detail::empty_schedule("zb-h1", p, m);
  for (int stage = 0; stage < p; ++stage) {
    const int warmup = std::min(p - stage - 1, m);
    int next_f = 0;
    int next_i = 0;
    std::deque<int> owed_w;  // micro-batches whose I ran and whose W did not, oldest first
    auto f = [&] { detail::emit(s, stage, stage, ActionKind::kForward, next_f++); };
    auto i = [&] {
      detail::emit(s, stage, stage, ActionKind::kBackwardInput, next_i);
      owed_w.push_back(next_i++);
      // Stage s keeps up to s W's owed: p-s-1 warm-up cells + 1 + s = p in flight.
      if (static_cast<int>(owed_w.size()) > stage) {
        detail::emit(s, stage, stage, ActionKind::kBackwardWeight, owed_w.front());
        owed_w.pop_front();
      }
    };
    while (next_f < warmup) f();
    while (next_f < m) {
      f();
      i();
    }
    while (next_i < m) i();
    for (int j : owed_w) detail::emit(s, stage, stage, ActionKind::kBackwardWeight, j);
  }
  return s;
}

// ZB-H2 is built by replaying the pipeline in unit time steps (tF = tI = tW = 1). Whenever a
// stage is free it takes, in this order of preference:
//   1. the next I, if its gradient has arrived (I's are on the critical path);
//   2. the next F, if its input has arrived and fewer than 2p-1 micro-batches are in flight;
//   3. the oldest owed W (W's only fill gaps);
// and otherwise idles for one step. The order each stage took is the schedule. Because it is
// read off a feasible run, it replays (and validates) by construction.
Schedule zb_h2(int p, int m) {
  Schedule s = detail::empty_schedule("zb-h2", p, m);
  constexpr int kNotYet = std::numeric_limits<int>::max();
  const int cap = 2 * p - 1;
  // f_end[st][j], i_end[st][j]: the step at which F / I of micro-batch j ended on stage st.
  std::vector<std::vector<int>> f_end(p, std::vector<int>(m, kNotYet));
  std::vector<std::vector<int>> i_end(p, std::vector<int>(m, kNotYet));
  std::vector<int> next_f(p, 0), next_i(p, 0), next_w(p, 0);
  int finished = 0;
  // Every stage can always make progress within a few steps; the bound only guards the loop.
  const int max_steps = 4 * (3 * m + p) + 16;
  for (int t = 0; finished < p; ++t) {
    if (t > max_steps) throw std::logic_error("zb_h2: the unit-time replay did not finish");
    for (int st = 0; st < p; ++st) {
      if (next_w[st] == m) continue;
      const int i = next_i[st];
      const int f = next_f[st];
      const bool i_ready = i < f && f_end[st][i] <= t && (st == p - 1 || i_end[st + 1][i] <= t);
      const bool f_ready = f < m && f - next_w[st] < cap && (st == 0 || f_end[st - 1][f] <= t);
      if (i_ready) {
        detail::emit(s, st, st, ActionKind::kBackwardInput, i);
        i_end[st][i] = t + 1;
        ++next_i[st];
      } else if (f_ready) {
        detail::emit(s, st, st, ActionKind::kForward, f);
        f_end[st][f] = t + 1;
        ++next_f[st];
      } else if (next_w[st] < next_i[st]) {
        detail::emit(s, st, st, ActionKind::kBackwardWeight, next_w[st]);
        if (++next_w[st] == m) ++finished;
      }
    }
  }
  return s;
}

}  // namespace pipewright::pipeline
