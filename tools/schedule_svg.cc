// schedule_svg: prints a schedule's replayed timeline as SVG (default), ASCII or Chrome
// trace JSON, or its replayed numbers (makespan, idle, bubble, peak activations).
//
//   tools/bazel run //tools:schedule_svg -- 1f1b 4 8 > docs/img/1f1b.svg
//   tools/bazel run //tools:schedule_svg -- interleaved-1f1b 4 8 2 --ascii
//   tools/bazel run //tools:schedule_svg -- gpipe 4 8 --recompute except_last --stats
//   tools/bazel run //tools:schedule_svg -- zb-h1 4 8 --trace > /tmp/zb-h1.json
//   tools/bazel run //tools:schedule_svg -- zb-v 4 8 --torch-csv   # for torch.distributed
//   tools/bazel run //tools:schedule_svg -- 1f1b 4 8 --csv > /tmp/mine.csv   # to edit by hand
//   tools/bazel run //tools:schedule_svg -- --from /tmp/mine.csv --ascii     # read back
//
// --from FILE reads a schedule instead of generating one: pipewright's CSV (to_csv's format,
// with its header line) or torch.distributed.pipelining's action CSV; either is validated
// before anything is printed, so a hand-edited schedule that would deadlock is refused here
// with the workers it would block. NAME P M [V] and --recompute are then not used.
//
// NAME is a registered schedule (pipeline/schedule/registry.h; the usage line lists them); V
// defaults to the least the schedule takes (2 for the V-shaped ones, else 1).
//
// Costs: tF = 1, tB = 2, tI = tW = 1, tR = 1 (pipeline/schedule/replay.h), unless --costs F,B,
// --costs F,I,W (tB = tI + tW, tR = tF) or --costs F,I,W,R is given; --comm L adds L to every
// dependency between two workers (a message's cost); --stage-factors A,B,... multiplies stage s's
// costs by its entry (one per stage: an uneven cut, a slower device). The schedule explorer (docs/explorer.md)
// shows the same numbers for the same input; its browser test compares them with --stats.
#include <charconv>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/schedule/ascii.h"
#include "pipeline/schedule/generators.h"
#include "pipeline/schedule/io.h"
#include "pipeline/schedule/replay.h"
#include "pipeline/schedule/svg.h"
#include "pipeline/trace.h"

using namespace pipewright::pipeline;

namespace {

std::string stats(const Schedule& s, const Costs& costs) {
  const ScheduleReplay sim = replay_schedule(s, costs);
  auto list = [](const auto& values) {
    std::string out;
    for (const auto& x : values) {
      if (!out.empty()) out += ' ';
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", static_cast<double>(x));
      out += buf;
    }
    return out;
  };
  char head[160];  // the name goes first, outside the buffer: a --from path may be long
  std::snprintf(head, sizeof head, " p=%d m=%d stages=%d: makespan %g, bubble %.4f\n", s.num_workers,
                s.num_microbatches, s.num_stages, sim.makespan, sim.bubble_fraction);
  return s.name + head + "idle per worker:                    " + list(sim.idle) + "\n" +
         "peak activations per stage:         " + list(sim.memory.stage_activations) + "\n" +
         "peak checkpointed inputs per stage: " + list(sim.memory.stage_checkpointed_inputs) + "\n" +
         "peak activations per worker:        " + list(sim.memory.worker_activations) + "\n";
}

// The whole of `text` as a number, or std::invalid_argument naming `what` and `text`.
template <typename T>
T parse_number(const std::string& text, const std::string& what) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    throw std::invalid_argument(what + " '" + text + "' is not a number");
  }
  return value;
}

std::vector<double> parse_costs(const std::string& s) {
  std::vector<double> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    const std::string entry = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    out.push_back(parse_number<double>(entry, "--costs " + s + ": entry " + std::to_string(out.size() + 1)));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  bool ascii = false;
  bool print_stats = false;
  bool trace = false;
  bool torch_csv = false;
  bool csv = false;
  std::string from;
  std::string recompute = "never";
  Costs costs;
  std::vector<double> stage_factors;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--ascii") {
        ascii = true;
      } else if (arg == "--stats") {
        print_stats = true;
      } else if (arg == "--trace") {
        trace = true;
      } else if (arg == "--torch-csv") {
        torch_csv = true;
      } else if (arg == "--csv") {
        csv = true;
      } else if (arg == "--from" && i + 1 < argc) {
        from = argv[++i];
      } else if (arg == "--recompute" && i + 1 < argc) {
        recompute = argv[++i];
      } else if (arg == "--costs" && i + 1 < argc) {
        const std::vector<double> c = parse_costs(argv[++i]);
        const double comm = costs.comm_latency;
        if (c.size() == 2) {
          costs = Costs::unit(c[0], c[1]);
        } else if (c.size() == 3 || c.size() == 4) {
          costs = Costs::split(c[0], c[1], c[2]);
          if (c.size() == 4) costs.uniform.recompute = c[3];
        } else {
          throw std::invalid_argument("--costs takes F,B or F,I,W or F,I,W,R");
        }
        costs.comm_latency = comm;
      } else if (arg == "--stage-factors" && i + 1 < argc) {
        stage_factors = parse_costs(argv[++i]);
      } else if (arg == "--comm" && i + 1 < argc) {
        costs.comm_latency = parse_number<double>(argv[++i], "--comm");
      } else {
        positional.push_back(arg);
      }
    }
    const bool generate = from.empty();
    if (generate ? positional.size() < 3 || positional.size() > 4 : !positional.empty()) {
      std::fprintf(stderr,
                   "usage: schedule_svg (NAME P M [V] [--recompute always|except_last|never] | "
                   "--from FILE)\n"
                   "                    [--ascii | --stats | --trace | --csv | --torch-csv] "
                   "[--costs F,B | F,I,W | F,I,W,R] [--comm L]\n"
                   "                    [--stage-factors A,B,...: each stage's costs times its factor]\n"
                   "NAME, one of:\n%s",
                   describe_schedules().c_str());
      return 2;
    }
    Schedule s;
    if (generate) {
      const int p = parse_number<int>(positional[1], "P");
      const int m = parse_number<int>(positional[2], "M");
      const int v = positional.size() == 4 ? parse_number<int>(positional[3], "V")
                                           : find_schedule(positional[0]).virtual_stages.min;
      s = make_schedule(positional[0], p, m, v);
      s = with_recompute(s, checkpoint_predicate(parse_checkpoint(recompute), m));
    } else {
      std::ifstream file(from);
      if (!file) throw std::invalid_argument("cannot read " + from);
      std::ostringstream text;
      text << file.rdbuf();
      try {
        s = from_any_csv(text.str(), from);
      } catch (const std::exception& e) {
        throw std::invalid_argument(from + ": " + e.what());
      }
    }
    if (!stage_factors.empty()) {
      if (stage_factors.size() != static_cast<size_t>(s.num_stages)) {
        throw std::invalid_argument("--stage-factors has " + std::to_string(stage_factors.size()) +
                                    " entries for " + std::to_string(s.num_stages) + " stages");
      }
      for (const double f : stage_factors) {
        const StageCosts& u = costs.uniform;
        costs.per_stage.push_back(StageCosts{.forward = u.forward * f,
                                             .backward = u.backward * f,
                                             .backward_input = u.backward_input * f,
                                             .backward_weight = u.backward_weight * f,
                                             .recompute = u.recompute * f});
      }
    }
    std::string out;
    if (print_stats) {
      out = stats(s, costs);
    } else if (torch_csv) {
      out = to_torch_csv(s);
    } else if (csv) {
      out = to_csv(s);
    } else if (trace) {
      out = Trace::replayed(s, costs).to_chrome_json();
    } else {
      out = ascii ? to_ascii(s, costs) : to_svg(s, costs);
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "schedule_svg: %s\n", e.what());
    return 1;
  }
  return 0;
}
