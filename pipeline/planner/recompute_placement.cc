// place_recomputes: Note [Placing recomputes] (recompute_placement.h).
#include "pipeline/planner/recompute_placement.h"

#include <algorithm>
#include <set>
#include <utility>

#include "pipeline/schedule/generators/recompute.h"

namespace pipewright::pipeline {
namespace {

using CellId = std::pair<int, int>;  // (stage, micro-batch)

int64_t level(const DevicePeak& p, bool worst_case) { return worst_case ? p.high : p.predicted; }

RecomputePlacement evaluate(const Schedule& base, const std::set<CellId>& cells,
                            const Costs& costs, const MemoryModel& model, int64_t cap,
                            bool worst_case) {
  RecomputePlacement r;
  r.schedule = cells.empty() ? base : with_recompute(base, [&cells](int s, int j) {
    return cells.count({s, j}) > 0;
  });
  r.replay = replay_schedule(r.schedule, costs);
  r.peaks = replay_memory(r.schedule, r.replay, model, worst_case);
  r.recomputed = static_cast<int>(cells.size());
  r.fits = true;
  if (cap > 0) {
    for (const DevicePeak& p : r.peaks) r.fits = r.fits && level(p, worst_case) <= cap;
  }
  return r;
}

struct Candidate {
  CellId cell;
  double slack = 0;     // idle time before its backward minus the recompute's cost
  int64_t saving = 0;   // bytes it stops holding at the peak
  int forward_at = 0;   // its forward's index in the worker's list
};

// The cells of worker w that hold full activations during its k-th action and are not
// checkpointed yet, best first.
std::vector<Candidate> candidates(const RecomputePlacement& current, const std::set<CellId>& cells,
                                  const Costs& costs, const MemoryModel& model, int w, int k) {
  const Schedule& s = current.schedule;
  const auto& list = s.actions[static_cast<size_t>(w)];
  const auto& timeline = current.replay.timeline[static_cast<size_t>(w)];
  std::vector<Candidate> out;
  for (size_t f = 0; f <= static_cast<size_t>(k) && f < list.size(); ++f) {
    const Action& a = list[f];
    if (a.kind != ActionKind::kForward || cells.count({a.stage, a.microbatch})) continue;
    for (size_t b = static_cast<size_t>(k) + 1; b < list.size(); ++b) {
      const Action& x = list[b];
      if (x.stage != a.stage || x.microbatch != a.microbatch) continue;
      if (x.kind != ActionKind::kBackward && x.kind != ActionKind::kBackwardInput) continue;
      const double gap = timeline[b].start - (b > 0 ? timeline[b - 1].end : 0.0);
      const StageMemory& mem = model.of(a.stage, a.microbatch, s.num_microbatches);
      out.push_back({{a.stage, a.microbatch}, gap - costs.of({a.stage, ActionKind::kRecompute, a.microbatch}),
                     mem.forward.delta - mem.checkpoint.delta, static_cast<int>(f)});
      break;
    }
  }
  std::sort(out.begin(), out.end(), [](const Candidate& x, const Candidate& y) {
    if (x.slack != y.slack) return x.slack > y.slack;
    if (x.saving != y.saving) return x.saving > y.saving;
    return x.forward_at < y.forward_at;
  });
  return out;
}

}  // namespace

RecomputePlacement place_recomputes(const Schedule& schedule, const Costs& costs,
                                    const MemoryModel& model, int64_t cap, double give_up_us,
                                    bool worst_case) {
  std::set<CellId> cells;
  RecomputePlacement current = evaluate(schedule, cells, costs, model, cap, worst_case);
  int64_t least = current.max_level(worst_case);
  while (!current.fits) {
    if (give_up_us > 0 && current.replay.makespan > give_up_us) {
      current.least_peak = least;
      return current;
    }
    // The device furthest above the cap, at the moment of its peak.
    int w = 0;
    for (int u = 1; u < static_cast<int>(current.peaks.size()); ++u) {
      if (level(current.peaks[static_cast<size_t>(u)], worst_case) >
          level(current.peaks[static_cast<size_t>(w)], worst_case)) {
        w = u;
      }
    }
    const DevicePeak& peak = current.peaks[static_cast<size_t>(w)];
    const int at = worst_case ? peak.at_high : peak.at;
    const std::vector<Candidate> found = candidates(current, cells, costs, model, w, at);
    if (found.empty()) break;  // out of reach on this path
    cells.insert(found.front().cell);
    current = evaluate(schedule, cells, costs, model, cap, worst_case);
    least = std::min(least, current.max_level(worst_case));
  }
  if (!current.fits) {
    // The path ended without fitting: every cell checkpointed may still fit (an R's own
    // peak can make it the leaner), and is the path's last resort.
    RecomputePlacement all = recompute_everything(schedule, costs, model, worst_case);
    least = std::min(least, all.max_level(worst_case));
    if (cap > 0 && all.max_level(worst_case) <= cap) {
      all.fits = true;
      current = std::move(all);
    }
  }
  current.least_peak = least;
  return current;
}

RecomputePlacement recompute_everything(const Schedule& schedule, const Costs& costs,
                                        const MemoryModel& model, bool worst_case) {
  std::set<CellId> cells;
  for (const auto& list : schedule.actions) {
    for (const Action& a : list) {
      if (a.kind == ActionKind::kForward) cells.insert({a.stage, a.microbatch});
    }
  }
  RecomputePlacement all = evaluate(schedule, cells, costs, model, 0, worst_case);
  all.least_peak = all.max_level(worst_case);
  return all;
}

int64_t RecomputePlacement::max_level(bool worst_case) const {
  int64_t peak = 0;
  for (const DevicePeak& p : peaks) peak = std::max(peak, level(p, worst_case));
  return peak;
}

}  // namespace pipewright::pipeline
