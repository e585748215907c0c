#include "pipeline/schedules/looped_bfs.h"

#include "pipeline/schedules/builder.h"

namespace pipewright::pipeline {

Schedule looped_bfs(int p, int m, int v) {
  Schedule s = detail::empty_schedule("looped-bfs", p, m, v);
  for (int w = 0; w < p; ++w) {
    for (int chunk = 0; chunk < v; ++chunk) {
      for (int j = 0; j < m; ++j) detail::emit(s, w, chunk * p + w, ActionKind::kForward, j);
    }
    for (int chunk = v - 1; chunk >= 0; --chunk) {
      for (int j = m - 1; j >= 0; --j) {
        detail::emit(s, w, chunk * p + w, ActionKind::kBackward, j);
      }
    }
  }
  return s;
}

}  // namespace pipewright::pipeline
