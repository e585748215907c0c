// One Chrome-trace layout for measured and replayed timelines: a step the runtime ran and
// the replay of the same schedule put the same actions on the same processes and threads.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/trace.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

// The layout of a trace's JSON, leaving out the sends thread (measured traces only) and times.
struct Layout {
  std::map<int, std::string> processes;                        // pid -> name
  std::map<std::pair<int, int>, std::string> threads;          // (pid, tid) -> name
  std::multiset<std::tuple<int, int, std::string, std::string>> actions;  // pid, tid, name, cat
};

Layout layout_of(const std::string& json) {
  const nlohmann::json doc = nlohmann::json::parse(json);
  Layout l;
  for (const auto& e : doc.at("traceEvents")) {
    const int pid = e.at("pid");
    const int tid = e.at("tid");
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      l.processes[pid] = e.at("args").at("name");
    } else if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      if (e.at("args").at("name") != "sends") l.threads[{pid, tid}] = e.at("args").at("name");
    } else if (e.at("ph") == "X" && e.at("cat") != "send" && e.at("cat") != "portal") {
      l.actions.emplace(pid, tid, e.at("name"), e.at("cat"));
    }
  }
  return l;
}

}  // namespace

TEST_CASE("a measured and a simulated trace of the same schedule have the same layout") {
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "interleaved-1f1b",
                                        "zb-h1");
  CAPTURE(schedule);
  const bool interleaved = schedule == "interleaved-1f1b";
  PipeOptions options{.balance = interleaved ? std::vector<int>{1, 2, 1, 1}
                                             : std::vector<int>{2, 3},
                      .devices = cpus(0, 2),
                      .chunks = 4,
                      .schedule = {.name = schedule, .virtual_stages = interleaved ? 2 : 1,
                                   .recompute = Checkpoint::kExceptLast}};
  Pipe pipe(small_mlp(3), options);
  StepResult r = pipe.train_step(randn({8, 4}, 1), randn({8, 3}, 2),
                                 [](const Tensor& out, const Tensor& t) {
                                   return nn::mse_loss(out, t);
                                 });
  const std::string measured = r.trace.to_chrome_json();
  const std::string simulated = Trace::replayed(r.schedule).to_chrome_json();
  const Layout m = layout_of(measured);
  const Layout s = layout_of(simulated);
  REQUIRE(m.processes == std::map<int, std::string>{{0, "worker 0"}, {1, "worker 1"}});
  REQUIRE(m.processes == s.processes);
  REQUIRE(m.threads == s.threads);
  REQUIRE(m.threads.size() == (interleaved ? 4u : 2u));  // a thread per stage
  REQUIRE(m.actions == s.actions);
  size_t actions = 0;
  for (const auto& list : r.schedule.actions) actions += list.size();
  REQUIRE(m.actions.size() == actions);
  REQUIRE(nlohmann::json::parse(measured).at("otherData").at("simulated") == false);
  REQUIRE(nlohmann::json::parse(simulated).at("otherData").at("simulated") == true);
}
