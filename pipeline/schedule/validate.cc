#include "pipeline/schedule/validate.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/schedule/deps.h"

namespace pipewright::pipeline {
namespace {

// Collects problems; the message lists the first few and counts the rest.
class Problems {
 public:
  void add(std::string text) { list_.push_back(std::move(text)); }
  bool empty() const { return list_.empty(); }
  [[noreturn]] void raise(const Schedule& s) const {
    constexpr size_t kShown = 8;
    std::string msg = "invalid schedule '" + s.name + "': ";
    for (size_t i = 0; i < list_.size() && i < kShown; ++i) {
      if (i > 0) msg += "; ";
      msg += list_[i];
    }
    if (list_.size() > kShown) msg += "; ... and " + std::to_string(list_.size() - kShown) + " more";
    throw std::invalid_argument(msg);
  }

 private:
  std::vector<std::string> list_;
};

std::string cell(int stage, int microbatch) {
  return "cell (stage " + std::to_string(stage) + ", micro-batch " + std::to_string(microbatch) + ")";
}

std::string times(int n) { return n == 1 ? "once" : std::to_string(n) + " times"; }

void check_shape(const Schedule& s, Problems& problems) {
  if (s.num_workers < 1) problems.add("num_workers = " + std::to_string(s.num_workers) + " < 1");
  if (s.num_stages < 1) problems.add("num_stages = " + std::to_string(s.num_stages) + " < 1");
  if (s.num_microbatches < 1) {
    problems.add("num_microbatches = " + std::to_string(s.num_microbatches) + " < 1");
  }
  if (static_cast<int>(s.actions.size()) != s.num_workers) {
    problems.add("actions has " + std::to_string(s.actions.size()) + " worker lists but num_workers = " +
                 std::to_string(s.num_workers));
  }
  if (static_cast<int>(s.stage_worker.size()) != s.num_stages) {
    problems.add("stage_worker has " + std::to_string(s.stage_worker.size()) +
                 " entries but num_stages = " + std::to_string(s.num_stages));
    return;
  }
  std::vector<bool> owns(std::max(s.num_workers, 0), false);
  for (int st = 0; st < s.num_stages; ++st) {
    const int w = s.stage_worker[st];
    if (w < 0 || w >= s.num_workers) {
      problems.add("stage_worker[" + std::to_string(st) + "] = " + std::to_string(w) +
                   " is not a worker (0.." + std::to_string(s.num_workers - 1) + ")");
    } else {
      owns[w] = true;
    }
  }
  for (int w = 0; w < static_cast<int>(owns.size()); ++w) {
    if (!owns[w]) problems.add("worker " + std::to_string(w) + " owns no stage");
  }
}

void check_placement(const Schedule& s, Problems& problems) {
  for (int w = 0; w < static_cast<int>(s.actions.size()); ++w) {
    for (const Action& a : s.actions[w]) {
      if (a.stage < 0 || a.stage >= s.num_stages) {
        problems.add("worker " + std::to_string(w) + " runs " + a.str() + " but stages are 0.." +
                     std::to_string(s.num_stages - 1));
      } else if (a.microbatch < 0 || a.microbatch >= s.num_microbatches) {
        problems.add("worker " + std::to_string(w) + " runs " + a.str() + " but micro-batches are 0.." +
                     std::to_string(s.num_microbatches - 1));
      } else if (s.stage_worker[a.stage] != w) {
        problems.add(a.str() + " is on worker " + std::to_string(w) + " but stage " +
                     std::to_string(a.stage) + " belongs to worker " +
                     std::to_string(s.stage_worker[a.stage]));
      }
    }
  }
}

void check_skips(const Schedule& s, Problems& problems) {
  for (const SkipEdge& e : s.skips) {
    if (e.from < 0 || e.to >= s.num_stages || e.from >= e.to) {
      problems.add("skip edge " + std::to_string(e.from) + " -> " + std::to_string(e.to) +
                   " needs 0 <= from < to <= " + std::to_string(s.num_stages - 1));
    }
  }
}

void check_cells(const Schedule& s, const ActionIndex& index, Problems& problems) {
  for (int st = 0; st < s.num_stages; ++st) {
    for (int j = 0; j < s.num_microbatches; ++j) {
      const int f = index.count(st, ActionKind::kForward, j);
      const int r = index.count(st, ActionKind::kRecompute, j);
      const int b = index.count(st, ActionKind::kBackward, j);
      const int i = index.count(st, ActionKind::kBackwardInput, j);
      const int w = index.count(st, ActionKind::kBackwardWeight, j);
      const Action F{st, ActionKind::kForward, j}, R{st, ActionKind::kRecompute, j},
          B{st, ActionKind::kBackward, j}, I{st, ActionKind::kBackwardInput, j},
          W{st, ActionKind::kBackwardWeight, j};
      if (f == 0) problems.add(F.str() + " is missing");
      if (f > 1) problems.add(F.str() + " appears " + times(f));
      if (b > 0 && (i > 0 || w > 0)) {
        problems.add(cell(st, j) + " has both B and I/W (use one B, or one I and one W)");
      } else if (b == 0 && i == 0 && w == 0) {
        problems.add(cell(st, j) + " has no backward (needs one B, or one I and one W)");
      } else if (b > 1) {
        problems.add(B.str() + " appears " + times(b));
      } else if (b == 0) {
        if (i != 1) problems.add(I.str() + (i == 0 ? " is missing (" + W.str() + " needs it)" : " appears " + times(i)));
        if (w != 1) problems.add(W.str() + (w == 0 ? " is missing (" + I.str() + " needs it)" : " appears " + times(w)));
      }
      if (r > 1) problems.add(R.str() + " appears " + times(r));
      if (r >= 1) {
        const auto rp = index.find(R);
        const auto bp = index.find(b > 0 ? B : I);
        if (bp && rp && rp->worker == bp->worker && rp->index > bp->index) {
          problems.add(R.str() + " comes after " + (b > 0 ? B : I).str() +
                       " (a recompute must precede its backward)");
        }
      }
    }
  }
}

}  // namespace

void validate(const Schedule& s) {
  Problems problems;
  check_shape(s, problems);
  if (!problems.empty()) problems.raise(s);
  check_placement(s, problems);
  check_skips(s, problems);
  const ActionIndex index(s);
  check_cells(s, index, problems);
  if (!problems.empty()) problems.raise(s);

  const Replay r = replay(s, [](const Action&) { return 1.0; });
  if (r.stuck.empty()) return;
  std::string msg = "invalid schedule '" + s.name + "': deadlock: ";
  for (size_t k = 0; k < r.stuck.size(); ++k) {
    const auto& wait = r.stuck[k];
    if (k > 0) msg += "; ";
    msg += "worker " + std::to_string(wait.worker) + " waits at " + wait.at.str() + " for " +
           wait.waits_for.str();
  }
  throw std::invalid_argument(msg);
}

}  // namespace pipewright::pipeline
