// The planner's prose: number and cut formats for Plan's text (plan.cc), and the search's
// sentences (search.cc): why a runner-up lost, and why nothing fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/planner/plan.h"

namespace pipewright::pipeline {

/// `value` with `digits` decimals ("12.50").
std::string fixed(double value, int digits);
/// Microseconds as milliseconds with two decimals ("1.25 ms").
std::string millis(double us);
/// A balance as the planner writes it: "4|9".
std::string balance_text(const std::vector<int>& balance);

/// "1f1b v1 chunks 8 balance 4|9", with " recompute 3" when recomputed > 0.
std::string config_text(const std::string& schedule, int v, int chunks,
                        const std::vector<int>& balance, int recomputed = 0);

/// What the search found of a configuration, as its sentences say it.
struct Contender {
  enum class Outcome { kFits, kSlower, kOutOfReach } outcome = Outcome::kOutOfReach;
  double step_us = 0;        // predicted step, the runtime's per-step part in
  double bubble = 0;         // fraction
  int64_t peak_bytes = 0;    // the largest device's
  std::string peak_device;   // its name
  int recomputed = 0;        // cells recomputed
};

/// Why `r` lost to `chosen` (PlanAlternative::why): "1.12x the plan's step (3.40 ms, bubble
/// 12.5 %)", "peak 3.0 MiB against the plan's 2.0 MiB" (objective kPeakMemory), "over the cap
/// on cpu:1 without recomputes, and slower than the plan once recomputing (...)", "needs ...
/// on cpu:1 with 6 recomputes, and no cell left to recompute at that peak (cap ...)".
std::string why_not(const Contender& r, const Contender& chosen, Objective objective,
                    int64_t cap);

/// NoPlanFits' message: the cap, the devices, the leanest configuration and what it needs.
std::string nothing_fits(int64_t cap, int workers, const std::string& leanest_config,
                         int64_t smallest);

}  // namespace pipewright::pipeline
