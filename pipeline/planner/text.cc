#include "pipeline/planner/text.h"

#include <cstdio>

namespace pipewright::pipeline {

std::string fixed(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string millis(double us) { return fixed(us / 1000.0, 2) + " ms"; }

std::string balance_text(const std::vector<int>& balance) {
  std::string out;
  for (int b : balance) out += (out.empty() ? "" : "|") + std::to_string(b);
  return out;
}

std::string config_text(const std::string& schedule, int v, int chunks,
                        const std::vector<int>& balance, int recomputed) {
  return schedule + " v" + std::to_string(v) + " chunks " + std::to_string(chunks) +
         " balance " + balance_text(balance) +
         (recomputed > 0 ? " recompute " + std::to_string(recomputed) : "");
}

std::string why_not(const Contender& r, const Contender& chosen, Objective objective,
                    int64_t cap) {
  switch (r.outcome) {
    case Contender::Outcome::kFits:
      if (objective == Objective::kPeakMemory) {
        return "peak " + format_bytes(r.peak_bytes) + " against the plan's " +
               format_bytes(chosen.peak_bytes);
      }
      return fixed(r.step_us / chosen.step_us, 2) + "x the plan's step (" + millis(r.step_us) +
             ", bubble " + fixed(100 * r.bubble, 1) + " %)";
    case Contender::Outcome::kSlower:
      return "over the cap on " + r.peak_device + " without recomputes, and slower than the " +
             "plan once recomputing (" + millis(r.step_us) + " with " +
             std::to_string(r.recomputed) + " recomputes and still " +
             format_bytes(r.peak_bytes) + ")";
    case Contender::Outcome::kOutOfReach:
      break;
  }
  return "needs " + format_bytes(r.peak_bytes) + " on " + r.peak_device + " with " +
         std::to_string(r.recomputed) +
         " recomputes, and no cell left to recompute at that peak (cap " + format_bytes(cap) +
         ")";
}

std::string nothing_fits(int64_t cap, int workers, const std::string& leanest_config,
                         int64_t smallest) {
  return "plan: nothing fits a memory cap of " + format_bytes(cap) + " per device on " +
         std::to_string(workers) + " devices: the leanest configuration (" + leanest_config +
         ", recomputing as needed) needs " + format_bytes(smallest) + " (" +
         std::to_string(smallest) + " bytes); raise the cap to at least that, or use more " +
         "devices";
}

}  // namespace pipewright::pipeline
