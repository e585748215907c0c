#include "pipeline/schedule/generators/gpipe.h"

#include "pipeline/schedule/generators/builder.h"

namespace pipewright::pipeline {

Schedule gpipe(int p, int m) {
  Schedule s = detail::empty_schedule("gpipe", p, m);
  for (int stage = 0; stage < p; ++stage) {
    for (int j = 0; j < m; ++j) detail::emit(s, stage, stage, ActionKind::kForward, j);
    for (int j = m - 1; j >= 0; --j) detail::emit(s, stage, stage, ActionKind::kBackward, j);
  }
  return s;
}

}  // namespace pipewright::pipeline
