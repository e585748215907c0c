#include "pipeline/schedule/schedule.h"

#include <stdexcept>
#include <string>

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

std::vector<int> round_robin_placement(int p, int v) {
  if (p < 1 || v < 1) {
    throw std::invalid_argument("round_robin_placement: p and v must be >= 1 (got p = " +
                                std::to_string(p) + ", v = " + std::to_string(v) + ")");
  }
  std::vector<int> placement(static_cast<size_t>(p * v));
  for (int s = 0; s < p * v; ++s) placement[static_cast<size_t>(s)] = s % p;
  return placement;
}

std::vector<int> v_placement(int p) {
  if (p < 1) {
    throw std::invalid_argument("v_placement: p must be >= 1 (got " + std::to_string(p) + ")");
  }
  std::vector<int> placement(static_cast<size_t>(2 * p));
  for (int w = 0; w < p; ++w) {
    placement[static_cast<size_t>(w)] = w;
    placement[static_cast<size_t>(2 * p - 1 - w)] = w;
  }
  return placement;
}

}  // namespace pipewright::pipeline
