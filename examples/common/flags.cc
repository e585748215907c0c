#include "examples/common/flags.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <vector>

#include "pipeline/planner/planner.h"
#include "pipeline/schedule/checkpoint_mode.h"
#include "pipeline/schedule/registry.h"
#include "pipewright/version.h"
#include "tensor/device.h"

namespace pipewright::examples {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text + ",") {
    if (c == ',') {
      if (!part.empty()) parts.push_back(part);
      part.clear();
    } else if (c != ' ') {
      part += c;
    }
  }
  return parts;
}

// "--balance 1,2,x: entry 3 ('x') ..." : which entry of which list flag is wrong.
std::string entry_error(const std::string& flag, const std::string& text, size_t index,
                        const std::string& entry, const std::string& what) {
  return flag + " " + text + ": entry " + std::to_string(index + 1) + " ('" + entry + "') " +
         what;
}

// The whole of `entry` as an int, or nullopt (no sign-less junk, no trailing characters).
std::optional<int> whole_int(const std::string& entry) {
  int value = 0;
  const char* end = entry.data() + entry.size();
  const auto [ptr, ec] = std::from_chars(entry.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::string join_commas(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : ",") + p;
  return text;
}

}  // namespace

TrainFlags::TrainFlags(CLI::App& app, TrainConfig& config, unsigned groups)
    : config_(config),
      checkpoint_(pipeline::to_string(config.checkpoint)),
      precision_(autograd::precision_name(config.precision)),
      float32_matmul_precision_(float32_matmul_precision_name(config.float32_matmul_precision)) {
  std::vector<std::string> parts;
  for (const Device& d : config.devices) parts.push_back(d.str());
  devices_ = join_commas(parts);
  parts.clear();
  for (int b : config.balance) parts.push_back(std::to_string(b));
  balance_ = config.auto_balance.empty() ? join_commas(parts) : "auto-" + config.auto_balance;
  TrainConfig& c = config;
  app.set_version_flag("--version", std::string("pipewright ") + PIPEWRIGHT_VERSION);
  app.option_defaults()->always_capture_default();
  if (groups & kEpochFlags) {
    app.add_option("--epochs", c.epochs, "Passes over the 60,000 training images");
    app.add_option("--stop-after", c.stop_after,
                   "Stop after this epoch (resume later with --resume; 0: run all)");
  }
  if (groups & kCommonFlags) {
    app.add_option("--batch-size", c.batch_size,
                   "Samples per mini-batch (split into --chunks micro-batches)");
    app.add_option("--lr", c.lr, "Learning rate");
  }
  if (groups & kEpochFlags) {
    app.add_option("--lr-schedule", c.lr_schedule,
                   "cosine (per step, from --lr down to 0) or constant")
        ->check(CLI::IsMember({"cosine", "constant"}));
    app.add_option("--optimizer", c.optimizer, "sgd (with --momentum) or adam")
        ->check(CLI::IsMember({"sgd", "adam"}));
    app.add_option("--momentum", c.momentum, "SGD's momentum, >= 0 (--optimizer sgd)");
  }
  if (groups & kCommonFlags) app.add_option("--weight-decay", c.weight_decay, "Weight decay");
  if (groups & kPipelineFlags) add_pipeline_flags(app, c);
  if (groups & kCommonFlags) {
    app.add_option("--seed", c.seed, "Seed of weights, data order and dropout");
  }
  if (groups & kDataFlags) {
    app.add_option("--data-dir", c.data_dir,
                   "Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist)");
    app.add_option("--train-limit", c.train_limit,
                   "Use only the first N training images (0: all)");
    app.add_option("--test-limit", c.test_limit, "Use only the first N test images (0: all)");
  }
  if (groups & kFileFlags) {
    app.add_option("--save", c.save, "Write a checkpoint (safetensors) here after every epoch");
    app.add_option("--resume", c.resume,
                   "Continue from a checkpoint written by --save (under any --workers, "
                   "--balance, --schedule, --chunks or --data-parallel)");
    app.add_option("--trace", c.trace,
                   "Write the Chrome trace (chrome://tracing, Perfetto) of one step (on GPUs, "
                   "when each action ran on the device)");
    app.add_option("--trace-step", c.trace_step,
                   "Which step --trace records: the run's N-th (1 is the cold first step)");
    app.add_flag("--no-progress", no_progress_, "Do not draw the progress bar");
  }
}

void TrainFlags::add_pipeline_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--workers", c.workers,
                 "Pipeline workers, one thread and device each (the Pipe's stages: workers x "
                 "--virtual-stages)");
  // Retired after 0.1.0 (it meant workers, which are not stages under interleaving): refused
  // with the new name, rather than CLI11's bare "not expected".
  app.add_option_function<int>(
      "--stages",
      [](const int&) {
        throw CLI::ValidationError("--stages", "retired: it is --workers now (the same number)");
      },
      "Retired: use --workers");
  app.add_option("--balance", balance_,
                 "Layers per stage, comma-separated, or auto-time / auto-size to profile the "
                 "layers (default: the cut whose largest stage by parameters is smallest)");
  app.add_option("--chunks", c.chunks, "Micro-batches per mini-batch");
  app.add_option("--checkpoint", checkpoint_,
                 "Activation checkpointing: always, except_last or never")
      ->check(CLI::IsMember({"always", "except_last", "never"}));
  app.add_option("--schedule", c.schedule, "Pipeline schedule, one of:\n" +
                                              pipeline::describe_schedules());
  app.add_option("--virtual-stages", c.virtual_stages,
                 "Virtual stages per worker (0: the least the schedule takes, the [v: ...] "
                 "above, else 1); the model is cut into workers x this many stages");
  app.add_option("--plan", c.plan,
                 "auto: choose balance, schedule, chunks, virtual stages and which cells "
                 "recompute with pipeline::plan under --memory-cap (overrides those flags)")
      ->check(CLI::IsMember({"", "auto"}));
  app.add_option("--memory-cap", memory_cap_,
                 "Bytes each device may hold at its peak for --plan auto, e.g. 64MiB, 1.5GiB "
                 "(default: no cap)");
  app.add_flag("--explain", c.explain,
               "With --plan auto: print the plan's alternatives and why each lost");
  app.add_option("--plan-cache", c.plan_cache,
                 "With --plan auto: keep the planner's profile and trials in this file and "
                 "reuse them when the model, batch shape and threads are the same (skips "
                 "profiling, and the trials of plans tried before)");
  app.add_option("--plan-trials", c.plan_trials,
                 "With --plan auto: run this many of the best plans for a few steps and take "
                 "the fastest measured (0: take the predicted best; default 3)");
  app.add_option("--devices", devices_,
                 "Device per worker, comma-separated, e.g. cpu:0,cpu:1 (default cpu:0..)");
  app.add_option("--threads", c.threads, "Intra-op threads per worker (0: cores / workers)");
  app.add_option("--precision", precision_,
                 "fp32, or bf16 / fp16: matrix products on 16-bit operands with float32 sums, "
                 "float32 master weights and optimizer (docs/precision.md)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--float32-matmul-precision", float32_matmul_precision_,
                 "On GPUs, float32 matrix products in float32 (highest) or TF32 on the tensor "
                 "cores (high), as torch.set_float32_matmul_precision; the CPU ignores it")
      ->check(CLI::IsMember({"highest", "high"}));
  app.add_flag("--cuda-graphs", c.cuda_graphs,
               "On GPUs (one, or several: one graph over them): capture a whole training step "
               "(the optimizer's included) as a CUDA graph once and replay it, a few host calls "
               "a step (not across processes)");
}

void TrainFlags::apply() {
  config_.checkpoint = pipeline::parse_checkpoint(checkpoint_);
  config_.precision = autograd::precision_from_name(precision_);
  config_.float32_matmul_precision = float32_matmul_precision_from_name(float32_matmul_precision_);
  config_.devices.clear();
  const std::vector<std::string> devices = split_commas(devices_);
  for (size_t i = 0; i < devices.size(); ++i) {
    try {
      config_.devices.push_back(Device::parse(devices[i]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(entry_error("--devices", devices_, i, devices[i], e.what()));
    }
  }
  config_.balance.clear();
  config_.auto_balance.clear();
  if (balance_.rfind("auto-", 0) == 0) {
    config_.auto_balance = balance_.substr(5);
  } else {
    const std::vector<std::string> entries = split_commas(balance_);
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::optional<int> layers = whole_int(entries[i]);
      if (!layers) {
        throw std::invalid_argument(entry_error(
            "--balance", balance_, i, entries[i],
            "is not a layer count (a whole number, or auto-time / auto-size for the list)"));
      }
      config_.balance.push_back(*layers);
    }
  }
  config_.memory_cap = 0;
  if (!memory_cap_.empty()) {
    try {
      config_.memory_cap = pipeline::parse_bytes(memory_cap_);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--memory-cap " + std::string(e.what()));
    }
  }
  config_.progress = !no_progress_;
  config_.save = user_path(config_.save);
  config_.resume = user_path(config_.resume);
  config_.trace = user_path(config_.trace);
  config_.plan_cache = user_path(config_.plan_cache);
}

CLI::Validator whole_number_entries() {
  return CLI::Validator(
      [](std::string& entry) -> std::string {
        int64_t value = 0;
        const char* end = entry.data() + entry.size();
        const auto [ptr, ec] = std::from_chars(entry.data(), end, value);
        if (entry.empty() || ec != std::errc() || ptr != end) {
          return "entry '" + entry + "' is not a whole number";
        }
        return "";
      },
      "INT");
}

std::string user_path(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || cwd == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

}  // namespace pipewright::examples
