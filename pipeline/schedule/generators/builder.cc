#include "pipeline/schedule/generators/builder.h"

#include <stdexcept>

namespace pipewright::pipeline::detail {

Schedule empty_schedule(const std::string& name, int p, int m, int v) {
  auto fail = [&](const std::string& what, int value) {
    throw std::invalid_argument(name + ": " + what + " must be >= 1 (got " +
                                std::to_string(value) + ")");
  };
  if (p < 1) fail("the number of workers p", p);
  if (m < 1) fail("the number of micro-batches m", m);
  if (v < 1) fail("the number of virtual stages per worker v", v);
  Schedule s;
  s.name = name;
  s.num_workers = p;
  s.num_stages = p * v;
  s.num_microbatches = m;
  s.stage_worker = round_robin_placement(p, v);
  s.actions.resize(p);
  return s;
}

}  // namespace pipewright::pipeline::detail
