// Fuzzes pipeline::from_csv and from_torch_csv (pipeline/schedule/io.h) with every input.
// Each must either throw std::invalid_argument, or give a schedule that validate() accepts,
// that the replay runs to the end (validate's promise: no deadlock), and that the
// matching writer (to_csv, to_torch_csv) writes back as text its reader reads to the same
// schedule.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "pipeline/schedule/io.h"
#include "pipeline/schedule/validate.h"
#include "pipeline/schedule/replay.h"

namespace {

namespace pl = pipewright::pipeline;
using pipewright::fuzz::check;

bool same(const pl::Schedule& a, const pl::Schedule& b) {
  return a.name == b.name && a.num_workers == b.num_workers && a.num_stages == b.num_stages &&
         a.num_microbatches == b.num_microbatches && a.stage_worker == b.stage_worker &&
         a.actions == b.actions;
}

/// What every schedule a reader accepted must satisfy.
void check_schedule(const pl::Schedule& s) {
  pl::validate(s);  // the reader validated it: throwing here is a bug (uncaught: a crash)
  const pl::ScheduleReplay sim = pl::replay_schedule(s);
  size_t timed = 0;
  for (const auto& list : sim.timeline) timed += list.size();
  size_t actions = 0;
  for (const auto& list : s.actions) actions += list.size();
  check(timed == actions, "the simulation did not run every action");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const pl::Schedule s = pl::from_csv(text);
    check_schedule(s);
    const std::string csv = pl::to_csv(s);
    check(same(pl::from_csv(csv), s), "to_csv / from_csv round trip differs:\n" + csv);
  } catch (const std::invalid_argument&) {
  }
  try {
    const pl::Schedule s = pl::from_torch_csv(text);
    check_schedule(s);
    const std::string csv = pl::to_torch_csv(s);
    check(same(pl::from_torch_csv(csv), s), "torch CSV round trip differs:\n" + csv);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
