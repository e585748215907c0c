// Fuzzes pipeline::from_csv (pipeline/schedule_io.h). Every input must either throw
// std::invalid_argument, or give a schedule that validate() accepts, that the simulator runs
// to the end (validate's promise: no deadlock), and that to_csv writes back as text from_csv
// reads to the same schedule.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "pipeline/schedule_io.h"
#include "pipeline/schedule_validate.h"
#include "pipeline/simulator.h"

namespace {

namespace pl = pipewright::pipeline;
using pipewright::fuzz::check;

bool same(const pl::Schedule& a, const pl::Schedule& b) {
  return a.name == b.name && a.num_workers == b.num_workers && a.num_stages == b.num_stages &&
         a.num_microbatches == b.num_microbatches && a.stage_worker == b.stage_worker &&
         a.actions == b.actions;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  pl::Schedule s;
  try {
    s = pl::from_csv(text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  pl::validate(s);  // from_csv validated it: throwing here is a bug (uncaught: a crash)
  const pl::Simulation sim = pl::simulate(s);
  size_t timed = 0;
  for (const auto& list : sim.timeline) timed += list.size();
  size_t actions = 0;
  for (const auto& list : s.actions) actions += list.size();
  check(timed == actions, "the simulation did not run every action");
  const std::string csv = pl::to_csv(s);
  check(same(pl::from_csv(csv), s), "to_csv / from_csv round trip differs:\n" + csv);
  return 0;
}
