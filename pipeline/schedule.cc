#include "pipeline/schedule.h"

namespace pipewright::pipeline {

char action_letter(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward: return 'F';
    case ActionKind::kRecompute: return 'R';
    case ActionKind::kBackward: return 'B';
    case ActionKind::kBackwardInput: return 'I';
    case ActionKind::kBackwardWeight: return 'W';
  }
  return '?';
}

std::string Action::str() const {
  std::string out(1, action_letter(kind));
  out += std::to_string(microbatch);
  out += '@';
  out += std::to_string(stage);
  return out;
}

std::vector<int> Schedule::stages_of(int worker) const {
  std::vector<int> stages;
  for (int s = 0; s < static_cast<int>(stage_worker.size()); ++s) {
    if (stage_worker[s] == worker) stages.push_back(s);
  }
  return stages;
}

}  // namespace pipewright::pipeline
