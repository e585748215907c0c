#include "pipeline/schedules/make_schedule.h"

#include <algorithm>
#include <stdexcept>

#include "pipeline/schedules/gpipe.h"
#include "pipeline/schedules/interleaved_1f1b.h"
#include "pipeline/schedules/one_f_one_b.h"
#include "pipeline/schedules/zero_bubble.h"

namespace pipewright::pipeline {

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names{"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2"};
  return names;
}

Schedule make_schedule(std::string_view name, int p, int m, int v) {
  if (name == "interleaved-1f1b") return interleaved_1f1b(p, m, v);
  Schedule (*generator)(int, int) = nullptr;
  if (name == "gpipe") generator = gpipe;
  if (name == "1f1b") generator = one_f_one_b;
  if (name == "zb-h1") generator = zb_h1;
  if (name == "zb-h2") generator = zb_h2;
  if (generator == nullptr) {
    std::string valid;
    for (const auto& n : schedule_names()) valid += (valid.empty() ? "'" : ", '") + n + "'";
    throw std::invalid_argument("unknown schedule '" + std::string(name) + "' (valid: " + valid + ")");
  }
  if (v != 1) {
    throw std::invalid_argument("schedule '" + std::string(name) +
                                "' has one model chunk per worker, so v must be 1 (got " +
                                std::to_string(v) + "); use 'interleaved-1f1b' for v > 1");
  }
  return generator(p, m);
}

std::vector<int> schedule_placement(std::string_view name, int p, int v) {
  return make_schedule(name, p, std::max(p, 1), v).stage_worker;
}

}  // namespace pipewright::pipeline
