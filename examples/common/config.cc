#include "examples/common/config.h"

#include <numeric>
#include <stdexcept>
#include <string>

#include "pipeline/schedule/registry.h"

namespace pipewright::examples {
namespace {

[[noreturn]] void bad(const std::string& flag, const std::string& value, const std::string& why) {
  throw std::invalid_argument("--" + flag + " " + value + ": " + why);
}

}  // namespace

void validate(const TrainConfig& c, size_t num_layers) {
  if (c.epochs < 1) bad("epochs", std::to_string(c.epochs), "must be at least 1");
  if (c.stop_after < 0) bad("stop-after", std::to_string(c.stop_after), "must be >= 0");
  if (c.trace_step < 1) bad("trace-step", std::to_string(c.trace_step), "must be at least 1");
  if (c.batch_size < 1) bad("batch-size", std::to_string(c.batch_size), "must be at least 1");
  if (!(c.lr > 0)) bad("lr", std::to_string(c.lr), "must be positive");
  if (c.lr_schedule != "cosine" && c.lr_schedule != "constant") {
    bad("lr-schedule", c.lr_schedule, "use cosine or constant");
  }
  if (c.optimizer != "sgd" && c.optimizer != "adam") bad("optimizer", c.optimizer, "use sgd or adam");
  if (c.weight_decay < 0) bad("weight-decay", std::to_string(c.weight_decay), "must be >= 0");
  if (!(c.momentum >= 0)) bad("momentum", std::to_string(c.momentum), "must be >= 0");
  if (c.hidden.empty()) bad("hidden", "(none)", "give at least one hidden width");
  for (int64_t h : c.hidden) {
    if (h < 1) bad("hidden", std::to_string(h), "widths must be at least 1");
  }
  if (c.dropout < 0 || c.dropout >= 1) bad("dropout", std::to_string(c.dropout), "must be in [0, 1)");
  try {
    (void)pipeline::find_schedule(c.schedule);
  } catch (const std::invalid_argument& e) {
    bad("schedule", c.schedule, e.what());
  }
  if (c.virtual_stages < 0) {
    bad("virtual-stages", std::to_string(c.virtual_stages), "must be >= 0 (0: the schedule's)");
  }
  if (c.workers < 1 || static_cast<size_t>(num_partitions(c)) > num_layers) {
    bad("workers", std::to_string(c.workers),
        "times " + std::to_string(virtual_stages_per_worker(c)) +
            " virtual stages must be between 1 and the model's " + std::to_string(num_layers) +
            " layers");
  }
  if (!c.auto_balance.empty()) {
    if (c.auto_balance != "time" && c.auto_balance != "size") {
      bad("balance", "auto-" + c.auto_balance, "must be auto-time, auto-size or a list of layer counts");
    }
    if (!c.balance.empty()) bad("balance", "auto-" + c.auto_balance, "cannot be combined with a list");
  }
  if (!c.balance.empty()) {
    const int total = std::accumulate(c.balance.begin(), c.balance.end(), 0);
    std::string text;
    for (int b : c.balance) text += (text.empty() ? "" : ",") + std::to_string(b);
    if (static_cast<int>(c.balance.size()) != num_partitions(c)) {
      bad("balance", text, "has " + std::to_string(c.balance.size()) + " entries for " +
                               std::to_string(num_partitions(c)) + " partitions (" +
                               std::to_string(c.workers) + " workers x " +
                               std::to_string(virtual_stages_per_worker(c)) + " virtual stages)");
    }
    if (static_cast<size_t>(total) != num_layers) {
      bad("balance", text, "sums to " + std::to_string(total) + " but the model has " +
                               std::to_string(num_layers) + " layers");
    }
  }
  if (c.chunks < 1) bad("chunks", std::to_string(c.chunks), "must be at least 1");
  if (!c.devices.empty() && static_cast<int>(c.devices.size()) < c.workers) {
    bad("devices", std::to_string(c.devices.size()) + " devices",
        "fewer than the " + std::to_string(c.workers) + " workers");
  }
  if (c.data_parallel < 1) bad("data-parallel", std::to_string(c.data_parallel), "must be >= 1");
  if (c.data_parallel > 1 && !c.distributed) {
    bad("data-parallel", std::to_string(c.data_parallel),
        "needs one process per worker and replica: mpirun -np " +
            std::to_string(c.workers * c.data_parallel));
  }
  if (c.plan != "" && c.plan != "auto") bad("plan", c.plan, "must be auto (or not given)");
  if (c.plan.empty() && c.memory_cap > 0) {
    bad("memory-cap", std::to_string(c.memory_cap), "is read only with --plan auto");
  }
  if (c.memory_cap < 0) bad("memory-cap", std::to_string(c.memory_cap), "must be >= 0");
  if (c.plan.empty() && !c.plan_cache.empty()) {
    bad("plan-cache", c.plan_cache, "is read only with --plan auto");
  }
  if (c.plan.empty() && c.plan_trials >= 0) {
    bad("plan-trials", std::to_string(c.plan_trials), "is read only with --plan auto");
  }
  if (c.plan_trials < -1) bad("plan-trials", std::to_string(c.plan_trials), "must be >= 0");
  if (!c.plan.empty() && c.distributed) {
    bad("plan", c.plan, "runs in one process (the planner probes every stage here)");
  }
  if (c.threads < 0) bad("threads", std::to_string(c.threads), "must be >= 0 (0: automatic)");
  if (c.train_limit < 0) bad("train-limit", std::to_string(c.train_limit), "must be >= 0");
  if (c.test_limit < 0) bad("test-limit", std::to_string(c.test_limit), "must be >= 0");
}

int virtual_stages_per_worker(const TrainConfig& c) {
  if (c.virtual_stages > 0) return c.virtual_stages;
  return pipeline::find_schedule(c.schedule).virtual_stages.min;
}

int num_partitions(const TrainConfig& c) { return c.workers * virtual_stages_per_worker(c); }

}  // namespace pipewright::examples
