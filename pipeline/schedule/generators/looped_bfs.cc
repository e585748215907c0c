#include "pipeline/schedule/generators/looped_bfs.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "pipeline/schedule/generators/builder.h"

namespace pipewright::pipeline {

Schedule looped_bfs(int p, int m, int v) {
  detail::empty_schedule("looped-bfs", p, m, v);  // checks p, m, v
  return looped_bfs(round_robin_placement(p, v), m);
}

Schedule looped_bfs(const std::vector<int>& stage_worker, int m) {
  const int p = stage_worker.empty()
                    ? 0
                    : *std::max_element(stage_worker.begin(), stage_worker.end()) + 1;
  Schedule s = detail::empty_schedule("looped-bfs", std::max(p, 1), m);
  if (stage_worker.empty()) throw std::invalid_argument("looped-bfs: the placement is empty");
  s.num_stages = static_cast<int>(stage_worker.size());
  s.stage_worker = stage_worker;
  for (int w = 0; w < p; ++w) {
    const std::vector<int> stages = s.stages_of(w);
    if (stages.empty()) {
      throw std::invalid_argument("looped-bfs: worker " + std::to_string(w) + " holds no stage");
    }
    for (int stage : stages) {
      for (int j = 0; j < m; ++j) detail::emit(s, w, stage, ActionKind::kForward, j);
    }
    for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
      for (int j = m - 1; j >= 0; --j) detail::emit(s, w, *it, ActionKind::kBackward, j);
    }
  }
  return s;
}

}  // namespace pipewright::pipeline
