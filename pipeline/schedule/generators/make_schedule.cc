#include "pipeline/schedule/generators/make_schedule.h"

#include <algorithm>
#include <stdexcept>

#include "pipeline/schedule/generators/gpipe.h"
#include "pipeline/schedule/generators/interleaved_1f1b.h"
#include "pipeline/schedule/generators/interleaved_zero_bubble.h"
#include "pipeline/schedule/generators/looped_bfs.h"
#include "pipeline/schedule/generators/one_f_one_b.h"
#include "pipeline/schedule/generators/v_shape.h"
#include "pipeline/schedule/generators/zero_bubble.h"

namespace pipewright::pipeline {

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names{"gpipe",          "1f1b",       "interleaved-1f1b",
                                              "zb-h1",          "zb-h2",      "interleaved-zb",
                                              "looped-bfs",     "zb-v",       "dualpipev"};
  return names;
}

Schedule make_schedule(std::string_view name, int p, int m, int v) {
  const std::string quoted = "schedule '" + std::string(name) + "'";
  if (name == "interleaved-1f1b") return interleaved_1f1b(p, m, v);
  if (name == "interleaved-zb") return interleaved_zero_bubble(p, m, v);
  if (name == "looped-bfs") return looped_bfs(p, m, v);
  if (name == "zb-v" || name == "dualpipev") {
    if (v != 2) {
      throw std::invalid_argument(quoted + " holds two stages per worker (a V), so v must be " +
                                  "2 (got " + std::to_string(v) + ")");
    }
    return name == "zb-v" ? zb_v(p, m) : dualpipev(p, m);
  }
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
    throw std::invalid_argument(quoted + " has one virtual stage per worker, so v must be 1 (got " +
                                std::to_string(v) +
                                "); use 'interleaved-1f1b', 'interleaved-zb' or 'looped-bfs' for "
                                "v > 1");
  }
  return generator(p, m);
}

std::vector<int> schedule_placement(std::string_view name, int p, int v) {
  return make_schedule(name, p, 2 * std::max(p, 1), v).stage_worker;
}

}  // namespace pipewright::pipeline
