// search_plan: Note [How the planner searches] (planner.h).
#include "pipeline/planner/search.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "pipeline/planner/cuts.h"
#include "pipeline/planner/recompute_placement.h"
#include "pipeline/planner/stage_estimate.h"
#include "pipeline/planner/text.h"
#include "pipeline/schedule/generators/recompute.h"
#include "pipeline/schedule/registry.h"
#include "pipeline/schedule/spec.h"

namespace pipewright::pipeline {
namespace {

struct Config {
  std::string schedule;
  int v = 1, chunks = 1, m = 1;
  int64_t rows = 0, tail_rows = 0;
  std::vector<int> balance;
  Schedule base;  // without R
  double base_time = 0;
};

using Outcome = Contender::Outcome;  // text.h

struct Result {
  size_t config = 0;
  RecomputePlacement placement;
  Outcome outcome = Outcome::kOutOfReach;
  bool exact = false;

  double step_us = 0;  // the replayed step (Note [Workers sharing cores]), per_step_us apart
  double bubble = 0;   // the replayed bubble fraction, as step_us

  double time() const { return step_us; }
  // The peaks held to the cap: the worst case when measured, else the replayed order's.
  int64_t peak_of(size_t w) const {
    return exact ? placement.peaks[w].high : placement.peaks[w].predicted;
  }
  int64_t max_peak() const {
    int64_t peak = 0;
    for (size_t w = 0; w < placement.peaks.size(); ++w) peak = std::max(peak, peak_of(w));
    return peak;
  }
  int worst_device() const {
    size_t w = 0;
    for (size_t i = 1; i < placement.peaks.size(); ++i) {
      if (peak_of(i) > peak_of(w)) w = i;
    }
    return static_cast<int>(w);
  }
};

class Search {
 public:
  explicit Search(const SearchInputs& in)
      : in_(in),
        profile_(*in.profile),
        options_(in.options),
        cap_(in.options.memory_cap_bytes),
        overhead_(in.options.runtime_overhead.value_or(RuntimeOverhead{})) {}

  std::vector<Plan> run(int count) {
    enumerate();
    if (configs_.empty()) {
      throw std::invalid_argument(
          "plan: no registered schedule can run " + std::to_string(profile_.num_layers()) +
          " layers on " + std::to_string(in_.workers) + " workers with the chunks and virtual "
          "stages allowed (every stage needs a layer, and no stage may lie inside a skip "
          "connection, stashed before it and popped after it)");
    }
    // Fastest first, so that the best that fits prunes the rest early.
    std::vector<size_t> order(configs_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return configs_[a].base_time < configs_[b].base_time;
    });
    double best = 0;
    for (size_t i : order) {
      const bool prune = options_.objective == Objective::kStepTime && best > 0;
      Result r = evaluate(i, false, prune ? best : 0);
      if (r.outcome == Outcome::kFits && (best == 0 || r.time() < best)) best = r.time();
      estimated_.push_back(std::move(r));
    }
    std::optional<Result> chosen = choose();
    if (!chosen) refuse();
    std::vector<Plan> plans = {make_plan(*chosen)};
    for (const Result& r : runners_up(*chosen, count - 1)) plans.push_back(make_plan(r));
    return plans;
  }

 private:
  // ---- what is searched ----

  void enumerate() {
    std::vector<ScheduleInfo> rows = registered_schedules();
    for (const ScheduleInfo& row : rows) {
      if (!options_.schedules.empty() &&
          std::find(options_.schedules.begin(), options_.schedules.end(), row.name) ==
              options_.schedules.end()) {
        continue;
      }
      const std::vector<int>& only = options_.virtual_stages;
      const int most = only.empty() ? options_.max_virtual_stages
                                    : *std::max_element(only.begin(), only.end());
      const int top = row.virtual_stages.max == 0 ? std::max(row.virtual_stages.min, most)
                                                  : row.virtual_stages.max;
      for (int v = row.virtual_stages.min; v <= top; ++v) {
        if (!only.empty() && std::find(only.begin(), only.end(), v) == only.end()) continue;
        const int stages = in_.workers * v;
        if (stages > profile_.num_layers()) continue;
        for (int c : chunk_candidates(options_, profile_.batch_rows)) {
          add_configs(row.name, v, c, stages);
        }
      }
    }
  }

  void add_configs(const std::string& name, int v, int chunks, int stages) {
    Config c;
    c.schedule = name;
    c.v = v;
    c.chunks = chunks;
    const std::vector<int64_t> sizes = microbatch_sizes(profile_.batch_rows, chunks);
    c.rows = sizes.front();
    c.m = static_cast<int>(sizes.size());
    c.tail_rows = sizes.back();
    try {
      c.base = make_schedule(name, in_.workers, c.m, v);
    } catch (const std::invalid_argument&) {
      return;  // the generator does not take this (p, m, v)
    }
    for (std::vector<int>& balance : balances(stages, c.rows, c.base)) {
      Config with = c;
      with.balance = std::move(balance);
      with.base_time = on_cores(with.base, costs_of(with)).makespan;
      configs_.push_back(std::move(with));
    }
  }

  // The min-max cuts of F+B and of F+B+R, balance_by_parameters' and, under a cap, the
  // min-max cut of F+B among the cuts whose stages' estimated peak fits (a stage holding the
  // cells the schedule keeps in flight on it).
  std::vector<std::vector<int>> balances(int stages, int64_t rows, const Schedule& base) {
    const int n = profile_.num_layers();
    std::vector<double> fb(static_cast<size_t>(n)), fbr(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const LayerProfile& l = profile_.layers[static_cast<size_t>(i)];
      const double f = l.forward_us.at(rows);
      fb[static_cast<size_t>(i)] = f + l.backward_us.at(rows);
      fbr[static_cast<size_t>(i)] = fb[static_cast<size_t>(i)] + f;
    }
    fb.back() += profile_.loss.forward_us.at(rows) + profile_.loss.backward_us.at(rows);
    fbr.back() += 2 * profile_.loss.forward_us.at(rows) + profile_.loss.backward_us.at(rows);
    std::vector<std::vector<int>> out;
    auto add = [&](std::vector<int> b) {
      if (b.empty() || std::find(out.begin(), out.end(), b) != out.end()) return;
      int at = 0;
      for (int layers : b) {
        if (!stage_allowed(in_.skips, at, at + layers)) return;
        at += layers;
      }
      out.push_back(std::move(b));
    };
    add(constrained_partition(fb, stages, in_.skips));
    add(constrained_partition(fbr, stages, in_.skips));
    if (in_.by_parameters) add(in_.by_parameters(stages));
    if (cap_ > 0) {
      // Prefix sums of the bytes a cell keeps per layer and of the parameters'.
      std::vector<double> kept(static_cast<size_t>(n) + 1, 0), params(static_cast<size_t>(n) + 1, 0);
      for (int i = 0; i < n; ++i) {
        const LayerProfile& l = profile_.layers[static_cast<size_t>(i)];
        kept[static_cast<size_t>(i) + 1] =
            kept[static_cast<size_t>(i)] + l.activation_bytes.at(rows) + l.output_bytes.at(rows);
        params[static_cast<size_t>(i) + 1] =
            params[static_cast<size_t>(i)] + static_cast<double>(l.parameter_bytes);
      }
      const std::vector<int> cells = peak_memory(base).stage_activations;
      const double share = static_cast<double>(cap_) / (stages / in_.workers);
      // A stage's estimated peak: its parameters, gradients and optimizer state, and the
      // cells the schedule keeps in flight on it, recorded or (recomputing) as inputs with
      // one cell rebuilt at a time.
      auto stage_bytes = [&](int i, int j, int s, bool recompute) {
        const auto input = static_cast<double>(stage_input_bytes(profile_, in_.skips, i, rows));
        const double cell = input + kept[static_cast<size_t>(j)] - kept[static_cast<size_t>(i)];
        const double p = params[static_cast<size_t>(j)] - params[static_cast<size_t>(i)];
        const int in_flight = std::max(1, cells[static_cast<size_t>(s)]);
        return p * (2 + options_.optimizer_state_factor) +
               (recompute ? in_flight * input + cell : in_flight * cell);
      };
      add(constrained_partition(fb, stages, in_.skips, [&](int i, int j, int s) {
        return stage_bytes(i, j, s, false) <= share;
      }));
      // The leanest cuts, without and with recomputes: where the cap is tight, these may be
      // the only ones that fit.
      for (bool recompute : {false, true}) {
        add(min_max_partition(n, stages, in_.skips, [&](int i, int j, int s) {
          return stage_bytes(i, j, s, recompute);
        }));
      }
    }
    return out;
  }

  // ---- costs of a configuration ----

  Costs costs_of(const Config& c) {
    Costs costs;
    int first = 0;
    for (int b : c.balance) {
      const auto key = std::make_tuple(first, first + b, c.rows);
      auto it = times_.find(key);
      if (it == times_.end()) {
        const StageCosts estimate =
            estimate_stage_times(profile_, first, first + b, c.rows, in_.skips);
        it = times_.emplace(key, estimate).first;
      }
      StageCosts stage = it->second;
      for (double* t : {&stage.forward, &stage.backward, &stage.backward_input,
                        &stage.backward_weight, &stage.recompute}) {
        *t += overhead_.per_action_us;  // Note [Runtime overhead]
      }
      costs.per_stage.push_back(stage);
      first += b;
    }
    costs.wake_latency = overhead_.wake_latency_us;  // Note [Waking an idle worker]
    costs.wake_after = overhead_.wake_after_us;
    return costs;
  }

  const StageMemory& stage_memory(int first, int last, int64_t rows, bool exact) {
    auto& memo = exact ? measured_ : estimated_memory_;
    const auto key = std::make_tuple(first, last, rows);
    auto it = memo.find(key);
    if (it == memo.end()) {
      it = memo.emplace(key, exact ? in_.measure(first, last, rows)
                                   : estimate_stage_memory(profile_, first, last, rows, in_.skips))
               .first;
    }
    return it->second;
  }

  // Note [Workers sharing cores]
  // The replay gives every worker a processor of its own: right for GPUs, and for CPU workers
  // while workers x threads fit the cores. When they do not (the GPT example's 4 workers on
  // 2 cores), the workers' actions take turns on the cores: the step and bubble are those of
  // the replay on shared processors (Note [Workers sharing processors], replay.h), the layers
  // having been timed with `threads` intra-op threads each (SearchInputs::shared_cores; 0 for
  // devices with processors of their own). Measured: docs/BENCHMARKS.md, "Planner: workers
  // sharing cores" and "Planner: cuts inside a skip, what layers free, shared cores".
  bool sharing_cores() const {
    return in_.shared_cores > 0 && in_.workers * profile_.threads > in_.shared_cores;
  }

  ScheduleReplay on_cores(const Schedule& schedule, const Costs& costs) const {
    if (sharing_cores()) {
      return replay_on_shared_processors(schedule, costs, in_.shared_cores, profile_.threads);
    }
    return replay_schedule(schedule, costs);
  }

  // The step and bubble of `r`'s placement on the cores.
  void time(Result& r) {
    if (!sharing_cores()) {
      r.step_us = r.placement.replay.makespan;
      r.bubble = r.placement.replay.bubble_fraction;
      return;
    }
    const ScheduleReplay shared = on_cores(r.placement.schedule, costs_of(configs_[r.config]));
    r.step_us = shared.makespan;
    r.bubble = shared.bubble_fraction;
  }

  MemoryModel memory_of(const Config& c, bool exact) {
    MemoryModel model;
    model.optimizer_state_factor = options_.optimizer_state_factor;
    model.copied_handoffs = options_.precision != autograd::Precision::kFloat32;
    int first = 0;
    for (int b : c.balance) {
      model.full.push_back(stage_memory(first, first + b, c.rows, exact));
      model.tail.push_back(stage_memory(first, first + b, c.tail_rows, exact));
      first += b;
    }
    return model;
  }

  Result evaluate(size_t i, bool exact, double give_up) {
    const Config& c = configs_[i];
    Result r;
    r.config = i;
    r.exact = exact;
    // Measured stages are held to the cap whatever the messages' timing (DevicePeak::high).
    r.placement =
        place_recomputes(c.base, costs_of(c), memory_of(c, exact), cap_, give_up, exact);
    time(r);
    r.outcome = r.placement.fits ? Outcome::kFits
                : give_up > 0 && r.step_us > give_up ? Outcome::kSlower
                                                     : Outcome::kOutOfReach;
    return r;
  }

  bool better(const Result& a, const Result& b) const {
    if (options_.objective == Objective::kPeakMemory && a.max_peak() != b.max_peak()) {
      return a.max_peak() < b.max_peak();
    }
    if (a.time() != b.time()) return a.time() < b.time();
    return a.max_peak() < b.max_peak();
  }

  // ---- choosing ----

  // The best candidate that fits, measured exactly when the search can measure: the best
  // `verify` by estimate (more when none of them fits once measured).
  std::optional<Result> choose() {
    std::vector<const Result*> fitting;
    for (const Result& r : estimated_) {
      if (r.outcome == Outcome::kFits) fitting.push_back(&r);
    }
    std::sort(fitting.begin(), fitting.end(),
              [&](const Result* a, const Result* b) { return better(*a, *b); });
    if (!in_.measure) {
      if (fitting.empty()) return std::nullopt;
      return *fitting.front();
    }
    const size_t verify = static_cast<size_t>(std::max(1, options_.verify));
    std::optional<Result> best;
    for (size_t k = 0; k < fitting.size() && k < 3 * verify; ++k) {
      if (best && k >= verify) break;
      Result exact = evaluate(fitting[k]->config, true, 0);
      if (exact.outcome == Outcome::kFits && (!best || better(exact, *best))) best = exact;
      verified_.push_back(std::move(exact));
    }
    // An estimate sums layers measured one at a time (stage_estimate.h) and may put a stage
    // over the cap that fits once measured: the fastest few such candidates that would beat
    // the best so far are measured too.
    // (Ranked by their time without recomputes: the estimate's placement may be needless.)
    const auto base_time = [&](const Result* r) { return configs_[r->config].base_time; };
    std::vector<const Result*> near;
    for (const Result& r : estimated_) {
      if (r.outcome != Outcome::kFits && (!best || base_time(&r) < best->time())) {
        near.push_back(&r);
      }
    }
    std::sort(near.begin(), near.end(),
              [&](const Result* a, const Result* b) { return base_time(a) < base_time(b); });
    for (size_t k = 0; k < near.size() && k < verify; ++k) {
      Result exact = evaluate(near[k]->config, true, 0);
      if (exact.outcome == Outcome::kFits && (!best || better(exact, *best))) best = exact;
      verified_.push_back(std::move(exact));
    }
    if (best) return best;
    // None fits by estimate (or once measured): the leanest candidates, measured.
    for (size_t i : leanest(verify)) {
      Result exact = evaluate(i, true, 0);
      if (exact.outcome == Outcome::kFits && (!best || better(exact, *best))) best = exact;
      verified_.push_back(std::move(exact));
    }
    return best;
  }

  // The plans worth running beside the chosen one (PlanOptions::trials): the best that fits
  // of each other (schedule, v, chunks) predicted within trial_margin of the chosen's step,
  // the fastest `count`, each measured exactly when the search measures (and dropped when it
  // does not fit once measured).
  std::vector<Result> runners_up(const Result& chosen, int count) {
    if (count < 1 || options_.objective != Objective::kStepTime) return {};
    const auto key = [&](const Result& r) {
      const Config& c = configs_[r.config];
      return std::make_tuple(c.schedule, c.v, c.chunks);
    };
    std::map<std::tuple<std::string, int, int>, const Result*> best;
    for (const Result& r : estimated_) {
      if (r.outcome != Outcome::kFits || key(r) == key(chosen) ||
          r.time() > options_.trial_margin * chosen.time()) {
        continue;
      }
      auto [it, inserted] = best.emplace(key(r), &r);
      if (!inserted && better(r, *it->second)) it->second = &r;
    }
    std::vector<const Result*> ranked;
    for (const auto& [k, r] : best) ranked.push_back(r);
    std::sort(ranked.begin(), ranked.end(),
              [&](const Result* a, const Result* b) { return better(*a, *b); });
    std::vector<Result> out;
    for (const Result* r : ranked) {
      if (out.size() == static_cast<size_t>(count)) break;
      Result candidate = in_.measure ? evaluate(r->config, true, 0) : *r;
      if (candidate.outcome == Outcome::kFits) out.push_back(std::move(candidate));
    }
    return out;
  }

  // The configurations whose every-cell-recomputed estimated peak is the smallest.
  std::vector<size_t> leanest(size_t count) {
    std::vector<std::pair<int64_t, size_t>> lean;
    for (size_t i = 0; i < configs_.size(); ++i) {
      const RecomputePlacement all = recompute_everything(
          configs_[i].base, costs_of(configs_[i]), memory_of(configs_[i], false), false);
      lean.push_back({all.max_level(false), i});
    }
    std::sort(lean.begin(), lean.end());
    std::vector<size_t> out;
    for (size_t k = 0; k < lean.size() && k < count; ++k) out.push_back(lean[k].second);
    return out;
  }

  // Nothing fits: name the least cap a configuration tried would fit, the least peak along
  // its placement path (Note [Placing recomputes]): measured ones when the search measures.
  [[noreturn]] void refuse() {
    const std::vector<Result>& tried = in_.measure ? verified_ : estimated_;
    const Result* leanest = nullptr;
    for (const Result& r : tried) {
      if (leanest == nullptr || r.placement.least_peak < leanest->placement.least_peak) {
        leanest = &r;
      }
    }
    if (leanest == nullptr) {
      throw std::logic_error("plan: no configuration was evaluated");
    }
    const int64_t smallest = leanest->placement.least_peak;
    const Config& c = configs_[leanest->config];
    throw NoPlanFits(nothing_fits(cap_, in_.workers,
                                  c.schedule + ", v " + std::to_string(c.v) + ", chunks " +
                                      std::to_string(c.chunks) + ", balance " +
                                      balance_text(c.balance),
                                  smallest),
                     smallest);
  }

  // ---- the answer ----

  std::string config_text(const Result& r) const {
    const Config& c = configs_[r.config];
    return pipeline::config_text(c.schedule, c.v, c.chunks, c.balance, r.placement.recomputed);
  }

  // A result's predicted step as Plan::step_time_us gives it: the runtime's per-step part in.
  double step(const Result& r) const { return r.time() + overhead_.per_step_us; }

  Contender contender(const Result& r) const {
    return {.outcome = r.outcome,
            .step_us = step(r),
            .bubble = r.bubble,
            .peak_bytes = r.max_peak(),
            .peak_device = in_.device_names[static_cast<size_t>(r.worst_device())],
            .recomputed = r.placement.recomputed};
  }

  std::string why(const Result& r, const Result& chosen) const {
    return why_not(contender(r), contender(chosen), options_.objective, cap_);
  }

  // The runners-up: the best result of each other (schedule, v, chunks), and the plan's own
  // configuration under the global checkpoint modes.
  std::vector<PlanAlternative> alternatives(const Result& chosen, const MemoryModel& model) {
    std::map<std::tuple<std::string, int, int>, const Result*> best;
    auto consider = [&](const Result& r) {
      const Config& c = configs_[r.config];
      const auto key = std::make_tuple(c.schedule, c.v, c.chunks);
      const Config& mine = configs_[chosen.config];
      if (key == std::make_tuple(mine.schedule, mine.v, mine.chunks)) return;
      auto [it, inserted] = best.emplace(key, &r);
      const bool fits = r.outcome == Outcome::kFits, had = it->second->outcome == Outcome::kFits;
      if (!inserted && ((fits && !had) || (fits == had && better(r, *it->second)))) it->second = &r;
    };
    for (const Result& r : estimated_) consider(r);
    for (const Result& r : verified_) consider(r);
    std::vector<const Result*> ranked;
    for (auto& [key, r] : best) ranked.push_back(r);
    std::sort(ranked.begin(), ranked.end(), [&](const Result* a, const Result* b) {
      const bool fa = a->outcome == Outcome::kFits, fb = b->outcome == Outcome::kFits;
      if (fa != fb) return fa;
      return better(*a, *b);
    });
    std::vector<PlanAlternative> out;
    const Config& c = configs_[chosen.config];
    const Costs costs = costs_of(c);
    for (Checkpoint mode : {Checkpoint::kNever, Checkpoint::kExceptLast, Checkpoint::kAlways}) {
      Result r;
      r.config = chosen.config;
      r.exact = chosen.exact;
      r.placement.schedule = with_recompute(c.base, checkpoint_predicate(mode, c.m));
      r.placement.replay = replay_schedule(r.placement.schedule, costs);
      time(r);
      r.placement.peaks =
          replay_memory(r.placement.schedule, r.placement.replay, model, chosen.exact);
      r.placement.fits = cap_ <= 0 || r.max_peak() <= cap_;
      r.outcome = r.placement.fits ? Outcome::kFits : Outcome::kOutOfReach;
      if (mode == Checkpoint::kNever && chosen.placement.recomputed == 0) continue;
      const std::string config =
          pipeline::config_text(c.schedule, c.v, c.chunks, c.balance) + " checkpoint " +
          to_string(mode);
      std::string reason = r.placement.fits ? why(r, chosen)
                                            : "needs " + format_bytes(r.max_peak()) + " on " +
                                                  in_.device_names[static_cast<size_t>(r.worst_device())];
      out.push_back({config, step(r), r.max_peak(), r.placement.fits, reason});
    }
    for (size_t k = 0; k < ranked.size() && static_cast<int>(k) < options_.alternatives; ++k) {
      const Result& r = *ranked[k];
      out.push_back({config_text(r) + (r.exact ? "" : " (estimated)"),
                     step(r), r.max_peak(),
                     r.outcome == Outcome::kFits, why(r, chosen)});
    }
    return out;
  }

  Plan make_plan(const Result& chosen) {
    const Config& c = configs_[chosen.config];
    const MemoryModel model = memory_of(c, chosen.exact);
    Plan plan;
    plan.schedule_name = c.schedule;
    plan.virtual_stages = c.v;
    plan.chunks = c.chunks;
    plan.balance = c.balance;
    plan.stage_worker = c.base.stage_worker;
    plan.num_microbatches = c.m;
    plan.rows = c.rows;
    plan.schedule = chosen.placement.schedule;
    plan.recomputed = chosen.placement.recomputed;
    plan.step_time_us = step(chosen);
    plan.bubble = chosen.bubble;
    plan.costs = costs_of(c);
    plan.overhead = overhead_;
    if (sharing_cores()) {
      plan.shared_cores = in_.shared_cores;
      plan.threads_per_worker = profile_.threads;
    }
    plan.peaks = replay_memory(plan.schedule, chosen.placement.replay, model, true);
    plan.exact_memory = chosen.exact;
    plan.memory_cap_bytes = cap_;
    plan.deferred_batch_norm = options_.deferred_batch_norm;
    plan.precision = options_.precision;
    plan.tied_parameters = options_.tied_parameters;
    plan.devices = in_.device_names;
    plan.alternatives = alternatives(chosen, model);
    plan.candidates = static_cast<int>(configs_.size());
    return plan;
  }

  const SearchInputs& in_;
  const ModelProfile& profile_;
  const PlanOptions& options_;
  int64_t cap_;
  RuntimeOverhead overhead_;  // Note [Runtime overhead]
  std::vector<Config> configs_;
  std::vector<Result> estimated_, verified_;
  std::map<std::tuple<int, int, int64_t>, StageCosts> times_;
  std::map<std::tuple<int, int, int64_t>, StageMemory> estimated_memory_, measured_;
};

}  // namespace

std::vector<int> chunk_candidates(const PlanOptions& options, int64_t batch_rows) {
  std::vector<int> chunks = options.chunks;
  if (chunks.empty()) chunks = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
  std::vector<int> out;
  std::vector<int64_t> seen_m;
  for (int c : chunks) {
    if (c < 1 || c > batch_rows) continue;
    const int64_t m = static_cast<int64_t>(microbatch_sizes(batch_rows, c).size());
    if (std::find(seen_m.begin(), seen_m.end(), m) != seen_m.end()) continue;
    seen_m.push_back(m);
    out.push_back(c);
  }
  return out;
}

std::vector<Plan> search_plans(const SearchInputs& inputs, int count) {
  return Search(inputs).run(std::max(1, count));
}

}  // namespace pipewright::pipeline
