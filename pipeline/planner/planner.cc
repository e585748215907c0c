// plan(): gathers the search's inputs (search.h) from a model or a profile, measures the best
// candidates' stages, runs the trials; Plan::pipe_options (Plan's text is plan.cc's).
#include "pipeline/planner/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

#include "pipeline/balance.h"
#include "pipeline/pipe_schedule.h"
#include "pipeline/planner/cache.h"
#include "pipeline/planner/cuts.h"
#include "pipeline/planner/runtime_overhead.h"
#include "pipeline/planner/search.h"
#include "pipeline/planner/trial.h"
#include "pipeline/schedule/registry.h"
#include "pipeline/schedule/spec.h"
#include "pipeline/worker.h"
#include "pipeline/worker_cpus.h"
#include "tensor/threads.h"

namespace pipewright::pipeline {
namespace {

// Exact stage measurements by (first layer, last layer, rows).
using StageMeasurements = std::map<std::tuple<int, int, int64_t>, StageMemory>;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}


void check_options(const PlanOptions& options) {
  if (options.memory_cap_bytes < 0) {
    throw std::invalid_argument("plan: memory_cap_bytes must be >= 0 (got " +
                                std::to_string(options.memory_cap_bytes) + ")");
  }
  if (options.max_virtual_stages < 1) {
    throw std::invalid_argument("plan: max_virtual_stages must be >= 1 (got " +
                                std::to_string(options.max_virtual_stages) + ")");
  }
  if (!(options.optimizer_state_factor >= 0)) {
    throw std::invalid_argument("plan: optimizer_state_factor must be >= 0 (got " +
                                std::to_string(options.optimizer_state_factor) + ")");
  }
  if (options.trials < 0) {
    throw std::invalid_argument("plan: trials must be >= 0 (got " +
                                std::to_string(options.trials) + ")");
  }
  if (!(options.trial_margin >= 1) || !std::isfinite(options.trial_margin)) {
    throw std::invalid_argument("plan: trial_margin must be finite and >= 1 (got " +
                                std::to_string(options.trial_margin) + ")");
  }
  if (!(options.trial_seconds >= 0) || !std::isfinite(options.trial_seconds)) {
    throw std::invalid_argument("plan: trial_seconds must be finite and >= 0 (got " +
                                std::to_string(options.trial_seconds) + ")");
  }
  for (const std::string& name : options.schedules) (void)find_schedule(name);
}


// The trial of `config` among `trials` that measured a step; nullptr if none.
const PlanTrial* measured_trial(const std::vector<PlanTrial>& trials, const std::string& config) {
  for (const PlanTrial& t : trials) {
    if (t.config == config && t.measured_us > 0) return &t;
  }
  return nullptr;
}

// Note [Trying the best plans] (trial.h): `candidates` (the predicted best first) run on the
// model; the fastest measured is returned with every trial, the predicted best when all threw.
// `cached` (PlanOptions::cache's trials, or null): when every candidate ran before, those
// measurements decide and nothing runs (Plan::trials_from_cache); else the new trials replace
// theirs there, and *cache_changed is set.
Plan fastest_in_trials(std::vector<Plan> candidates, nn::Sequential& model,
                       const PlanSample& sample, const std::vector<Device>& devices,
                       const PlanOptions& options, std::vector<PlanTrial>* cached,
                       bool* cache_changed) {
  std::vector<PlanTrial> trials;
  for (const Plan& p : candidates) {
    const PlanTrial* before = cached != nullptr ? measured_trial(*cached, p.str()) : nullptr;
    if (before == nullptr) break;
    trials.push_back(*before);
  }
  const bool from_cache = trials.size() == candidates.size();
  if (!from_cache) {
    std::vector<PipeOptions> runs;
    for (const Plan& p : candidates) {
      PipeOptions pipe = p.pipe_options(devices);
      pipe.threads_per_worker = options.threads_per_worker;
      runs.push_back(std::move(pipe));
    }
    trials = run_trials(model, sample.input, sample.target, sample.loss, runs,
                        {.seconds = options.trial_seconds});
    for (size_t k = 0; k < trials.size(); ++k) trials[k].config = candidates[k].str();
    if (cached != nullptr) {
      for (const PlanTrial& t : trials) {
        std::erase_if(*cached, [&](const PlanTrial& c) { return c.config == t.config; });
        cached->push_back(t);
      }
      *cache_changed = true;
    }
  }
  size_t fastest = 0;
  for (size_t k = 0; k < trials.size(); ++k) {
    trials[k].predicted_us = candidates[k].step_time_us;
    const double t = trials[k].measured_us, best = trials[fastest].measured_us;
    if (t > 0 && (best <= 0 || t < best)) fastest = k;
  }
  Plan chosen = std::move(candidates[fastest]);
  chosen.trial_step_us = trials[fastest].measured_us;
  chosen.trials = std::move(trials);
  chosen.trials_from_cache = from_cache;
  return chosen;
}

}  // namespace

namespace {

// plan()'s steps, in order.

// 1. The arguments: devices, the sample, and a model whose parameters are on a device of the
// plan's kind.
void check_plan_inputs(const nn::Sequential& model, const PlanSample& sample,
                       const std::vector<Device>& devices, const PlanOptions& options) {
  check_options(options);
  check_one_device_per_worker("plan", devices);
  if (!sample.input.defined() || !sample.target.defined() || !sample.loss) {
    throw std::invalid_argument("plan: the sample needs an input, a target and a loss");
  }
  // The profile and the probes time and count where the parameters are: a model on the host
  // planned for GPUs would get the CPU's times and bytes (no staged copies, no deferred
  // checks), a plan for another machine.
  const Device profiled = profile_device(model, sample.input);
  for (const Device& d : devices) {
    if (d.type != profiled.type) {
      throw std::invalid_argument("plan: the model's parameters are on " + profiled.str() +
                                  " but the plan is for " + d.str() +
                                  "; it is profiled where its parameters are, so move it to a " +
                                  device_type_name(d.type) + " device first (model.to(" +
                                  d.str() + "))");
    }
  }
}

// 2. The layer profile: the cache's when it was made for this model, sample and threads (its
// measured stages and trials come with it; returns true), else measured now.
bool read_or_profile(PlanCache& cache, nn::Sequential& model, const PlanSample& sample,
                     const PlanOptions& options, int threads, int workers) {
  if (!options.cache.empty()) {
    if (std::optional<PlanCache> read = read_plan_cache(options.cache)) {
      if (read->profile.fingerprint ==
          profile_fingerprint(model, sample.input, sample.target, threads,
                              options.deferred_batch_norm, options.precision)) {
        cache = std::move(*read);
        return true;
      }
    }
  }
  // The affine fits go through the smallest micro-batch the search tries and the whole
  // batch: interpolated, never extrapolated (a one-row micro-batch runs slower than a line
  // through 2 and 32 rows says: docs/BENCHMARKS.md, "Planner: cuts inside a skip, what
  // layers free, shared cores").
  const int64_t batch = sample.input.dim() > 0 ? sample.input.size(0) : 1;  // else profile throws
  const std::vector<int> chunks = chunk_candidates(options, batch);
  const int most = chunks.empty() ? 1 : *std::max_element(chunks.begin(), chunks.end());
  cache.profile = profile_model(model, sample.input, sample.target, sample.loss,
                                {.rows = {batch > 0 ? microbatch_sizes(batch, most).front() : 0,
                                          batch},
                                 .threads = threads,
                                 .workers = workers,
                                 .deferred_batch_norm = options.deferred_batch_norm,
                                 .precision = options.precision});
  return false;
}

// 3. The search's inputs from the model and its devices: the runtime's measured overhead, the
// cores the workers share, the skips, the parameter cut, and exact stage measurements (probed
// once each, kept in `measured`).
SearchInputs search_inputs(nn::Sequential& model, const PlanSample& sample,
                           const std::vector<Device>& devices, const PlanOptions& options,
                           const ModelProfile& profile, StageMeasurements& measured) {
  SearchInputs in;
  in.profile = &profile;
  in.workers = static_cast<int>(devices.size());
  in.options = options;
  if (!in.options.runtime_overhead) {  // Note [Runtime overhead]
    in.options.runtime_overhead = measure_runtime_overhead(devices, options.threads_per_worker);
  }
  for (const Device& d : devices) in.device_names.push_back(d.str());
  const bool all_cpu = std::all_of(devices.begin(), devices.end(),
                                   [](const Device& d) { return d.is_cpu(); });
  if (all_cpu) in.shared_cores = hardware_threads();  // Note [Workers sharing cores]
  in.skips = skip_spans(model);
  in.by_parameters = [&model](int parts) {
    return parts <= static_cast<int>(model.size()) ? balance_by_parameters(parts, model)
                                                   : std::vector<int>{};
  };
  in.measure = [&model, &sample, &measured, &options](int first, int last, int64_t rows) {
    const auto key = std::make_tuple(first, last, rows);
    auto it = measured.find(key);
    if (it == measured.end()) {
      it = measured.emplace(key, probe_stage(model, first, last, rows, sample.input,
                                             sample.target, sample.loss,
                                             {.deferred_batch_norm = options.deferred_batch_norm,
                                              .precision = options.precision}))
               .first;
    }
    return it->second;
  };
  return in;
}

}  // namespace

Plan plan(nn::Sequential& model, const PlanSample& sample, const std::vector<Device>& devices,
          const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  check_plan_inputs(model, sample, devices, options);
  const int workers = static_cast<int>(devices.size());
  const int threads = options.threads_per_worker > 0 ? options.threads_per_worker
                                                      : default_threads_per_worker(workers);
  PlanCache cache;
  const bool have_profile = read_or_profile(cache, model, sample, options, threads, workers);
  StageMeasurements measured;
  for (const StageMemory& m : cache.stages) measured[{m.first, m.last, m.rows}] = m;
  const size_t cached_stages = measured.size();

  // 4. The search, 5. the trials of the best few (Note [Trying the best plans]).
  std::vector<Plan> candidates = search_plans(
      search_inputs(model, sample, devices, options, cache.profile, measured), options.trials);
  bool new_trials = false;
  Plan result = candidates.size() > 1
                    ? fastest_in_trials(std::move(candidates), model, sample, devices, options,
                                        options.cache.empty() ? nullptr : &cache.trials,
                                        &new_trials)
                    : std::move(candidates.front());
  // 6. What was measured, back into the cache.
  if (!options.cache.empty() &&
      (!have_profile || measured.size() != cached_stages || new_trials)) {
    cache.stages.clear();
    for (const auto& [key, m] : measured) cache.stages.push_back(m);
    write_plan_cache(options.cache, cache);
  }
  result.profile_from_cache = have_profile;
  result.planning_seconds = seconds_since(start);
  return result;
}

Plan plan(const ModelProfile& profile, int num_devices, const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  check_options(options);
  if (num_devices < 1) {
    throw std::invalid_argument("plan: num_devices must be >= 1 (got " +
                                std::to_string(num_devices) + ")");
  }
  if (profile.layers.empty() || profile.batch_rows < 1) {
    throw std::invalid_argument("plan: the profile has no layers or no batch");
  }
  SearchInputs in;
  in.profile = &profile;
  in.workers = num_devices;
  for (int w = 0; w < num_devices; ++w) in.device_names.push_back("device " + std::to_string(w));
  in.options = options;
  Plan result = search_plans(in).front();
  result.planning_seconds = seconds_since(start);
  return result;
}

// ---- Plan ----

PipeOptions Plan::pipe_options(const std::vector<Device>& devices) const {
  PipeOptions o;
  o.balance = balance;
  o.devices = devices;
  o.chunks = chunks;
  o.schedule = {.name = schedule_name,
                .virtual_stages = virtual_stages,
                .stage_worker = stage_worker,
                .recompute = RecomputeCells{recomputed_cells(schedule)}};
  o.deferred_batch_norm = deferred_batch_norm;
  o.precision = precision;
  o.tied_parameters = tied_parameters;
  return o;
}

}  // namespace pipewright::pipeline
