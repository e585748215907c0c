#include "examples/fashion_mnist/flags.h"

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "pipeline/schedule/checkpoint_mode.h"
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

std::string join_commas(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : ",") + p;
  return text;
}

}  // namespace

TrainFlags::TrainFlags(CLI::App& app, TrainConfig& config)
    : config_(config), checkpoint_(pipeline::to_string(config.checkpoint)) {
  std::vector<std::string> parts;
  for (const Device& d : config.devices) parts.push_back(d.str());
  devices_ = join_commas(parts);
  parts.clear();
  for (int b : config.balance) parts.push_back(std::to_string(b));
  balance_ = config.auto_balance.empty() ? join_commas(parts) : "auto-" + config.auto_balance;
  TrainConfig& c = config;
  app.option_defaults()->always_capture_default();
  app.add_option("--epochs", c.epochs, "Passes over the 60,000 training images");
  app.add_option("--stop-after", c.stop_after,
                 "Stop after this epoch (resume later with --resume; 0: run all)");
  app.add_option("--batch-size", c.batch_size,
                 "Images per mini-batch (split into --chunks micro-batches)");
  app.add_option("--lr", c.lr, "Learning rate");
  app.add_option("--lr-schedule", c.lr_schedule,
                 "cosine (per step, from --lr down to 0) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}));
  app.add_option("--optimizer", c.optimizer, "sgd (momentum 0.9) or adam")
      ->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--weight-decay", c.weight_decay, "L2 weight decay");
  app.add_option("--stages", c.stages, "Pipeline stages (one worker thread and CPU device each)");
  app.add_option("--balance", balance_,
                 "Layers per stage, comma-separated, or auto-time / auto-size to profile the "
                 "layers (default: even split by parameters)");
  app.add_option("--chunks", c.chunks, "Micro-batches per mini-batch");
  app.add_option("--checkpoint", checkpoint_,
                 "Activation checkpointing: always, except_last or never")
      ->check(CLI::IsMember({"always", "except_last", "never"}));
  app.add_option("--schedule", c.schedule,
                 "Pipeline schedule: gpipe, 1f1b, zb-h1, zb-h2, interleaved-1f1b, interleaved-zb, "
                 "looped-bfs (with --virtual-stages 2 or more), zb-v, dualpipev (V-shaped: two "
                 "virtual stages per worker)");
  app.add_option("--virtual-stages", c.virtual_stages,
                 "Virtual stages per worker (0: the schedule's, 2 for zb-v and dualpipev, "
                 "else 1); the model is cut into stages x this many partitions");
  app.add_option("--devices", devices_,
                 "Device per stage, comma-separated, e.g. cpu:0,cpu:1 (default cpu:0..)");
  app.add_option("--threads", c.threads, "Intra-op threads per stage worker (0: cores / stages)");
  app.add_option("--seed", c.seed, "Seed of weights, shuffling and dropout");
  app.add_option("--data-dir", c.data_dir,
                 "Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist)");
  app.add_option("--train-limit", c.train_limit, "Use only the first N training images (0: all)");
  app.add_option("--test-limit", c.test_limit, "Use only the first N test images (0: all)");
  app.add_option("--save", c.save, "Write a checkpoint (safetensors) here after every epoch");
  app.add_option("--resume", c.resume, "Continue from a checkpoint written by --save");
  app.add_option("--trace", c.trace,
                 "Write the Chrome trace (chrome://tracing, Perfetto) of the first step");
  app.add_flag("--no-progress", no_progress_, "Do not draw the progress bar");
}

void TrainFlags::apply() {
  config_.checkpoint = pipeline::parse_checkpoint(checkpoint_);
  config_.devices.clear();
  for (const std::string& d : split_commas(devices_)) config_.devices.push_back(Device::parse(d));
  config_.balance.clear();
  config_.auto_balance.clear();
  if (balance_.rfind("auto-", 0) == 0) {
    config_.auto_balance = balance_.substr(5);
  } else {
    for (const std::string& b : split_commas(balance_)) {
      try {
        config_.balance.push_back(std::stoi(b));
      } catch (const std::logic_error&) {
        throw std::invalid_argument("--balance " + balance_ + ": '" + b + "' is not a layer count");
      }
    }
  }
  config_.progress = !no_progress_;
  config_.save = user_path(config_.save);
  config_.resume = user_path(config_.resume);
  config_.trace = user_path(config_.trace);
}

std::string user_path(const std::string& path) {
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || cwd == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

}  // namespace pipewright::examples
