#include "tests/examples/cross_run.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pipewright::testing {
namespace {

constexpr int64_t kImagePixels = 28 * 28;  // the example's input and output widths
constexpr int64_t kNumClasses = 10;

}  // namespace

examples::TrainConfig cross_run_config(const std::vector<Device>& devices,
                                       const std::string& schedule,
                                       pipeline::Checkpoint checkpoint,
                                       const std::string& optimizer, uint64_t seed) {
  examples::TrainConfig c;
  c.optimizer = optimizer;
  if (optimizer == "sgd") c.lr = 0.05;
  c.epochs = 1;
  c.batch_size = 64;
  c.chunks = 4;
  c.schedule = schedule;
  c.checkpoint = checkpoint;
  c.train_limit = 2048;
  c.test_limit = 1000;
  c.progress = false;
  c.seed = seed;
  c.workers = static_cast<int>(devices.size());
  c.devices = devices;
  return c;
}

examples::TrainConfig autoencoder_cross_run_config(const std::vector<Device>& devices,
                                                   const std::string& schedule,
                                                   pipeline::Checkpoint checkpoint,
                                                   uint64_t seed) {
  examples::TrainConfig c;
  c.optimizer = "sgd";
  c.lr = 0.2;
  c.epochs = 1;
  c.batch_size = 64;
  c.workers = static_cast<int>(devices.size());
  c.devices = devices;
  c.balance = {8, 12};  // the encoder (both stashes) | the rest (both pops)
  c.chunks = 4;
  c.schedule = schedule;
  c.checkpoint = checkpoint;
  c.dropout = 0;
  c.train_limit = 1024;
  c.test_limit = 200;
  c.progress = false;
  c.seed = seed;
  return c;
}

examples::Task autoencoder_cross_run_task() {
  return examples::autoencoder_task({.widths = {64, 32, 16}, .noise = 0.5});
}

nn::Sequential smooth_model(const std::vector<int64_t>& hidden, double dropout, uint64_t seed) {
  Generator init(seed);
  GeneratorGuard guard(init);
  nn::Sequential model;
  int64_t width = kImagePixels;
  for (int64_t h : hidden) {
    model.push_back(nn::Linear(width, h, /*bias=*/false));
    model.push_back(nn::BatchNorm1d(h));
    model.push_back(nn::Tanh());
    if (dropout > 0) model.push_back(nn::Dropout(dropout));
    width = h;
  }
  model.push_back(nn::Linear(width, kNumClasses));
  return model;
}

examples::Task smooth_task() {
  examples::Task task = examples::classifier_task();
  task.build_model = [](const examples::TrainConfig& c) {
    return smooth_model(c.hidden, c.dropout, c.seed);
  };
  return task;
}

std::string RunDistance::str() const {
  std::ostringstream os;
  os << "first loss " << first_loss << " | worst step loss " << worst_step_loss << " (step "
     << worst_step << ") | train loss " << train_loss << " | accuracy " << accuracy
     << " | state ratio " << state_ratio << " (" << worst_state << ")";
  return os.str();
}

namespace {

double relative(double a, double b) { return std::abs(b - a) / std::abs(a); }

// NaN counts as the worst.
void keep_worst(double value, double& worst) {
  if (!(value <= worst)) worst = std::isnan(value) ? INFINITY : value;
}

}  // namespace

RunDistance distance(const examples::TrainResult& a, const examples::TrainResult& b) {
  if (a.epochs.size() != b.epochs.size() || a.epochs.empty()) {
    throw std::invalid_argument("distance: runs of " + std::to_string(a.epochs.size()) + " and " +
                                std::to_string(b.epochs.size()) + " epochs");
  }
  RunDistance d;
  std::vector<double> la, lb;
  for (size_t e = 0; e < a.epochs.size(); ++e) {
    la.insert(la.end(), a.epochs[e].step_losses.begin(), a.epochs[e].step_losses.end());
    lb.insert(lb.end(), b.epochs[e].step_losses.begin(), b.epochs[e].step_losses.end());
    keep_worst(relative(a.epochs[e].train_loss, b.epochs[e].train_loss), d.train_loss);
    keep_worst(std::abs(a.epochs[e].test_accuracy - b.epochs[e].test_accuracy), d.accuracy);
    if (a.epochs[e].test_loss != 0) {
      keep_worst(relative(a.epochs[e].test_loss, b.epochs[e].test_loss), d.test_loss);
    }
  }
  if (la.size() != lb.size() || la.empty()) {
    throw std::invalid_argument("distance: runs of " + std::to_string(la.size()) + " and " +
                                std::to_string(lb.size()) + " steps");
  }
  d.first_loss = relative(la[0], lb[0]);
  for (size_t i = 0; i < la.size(); ++i) {
    const double before = d.worst_step_loss;
    keep_worst(relative(la[i], lb[i]), d.worst_step_loss);
    if (d.worst_step_loss != before) d.worst_step = i;
  }
  if (a.final_state.size() != b.final_state.size()) {
    throw std::invalid_argument("distance: final states of " +
                                std::to_string(a.final_state.size()) + " and " +
                                std::to_string(b.final_state.size()) + " tensors");
  }
  for (size_t i = 0; i < a.final_state.size(); ++i) {
    const auto& [name, ta] = a.final_state[i];
    if (b.final_state[i].first != name) {
      throw std::invalid_argument("distance: state " + name + " against " +
                                  b.final_state[i].first);
    }
    const std::vector<double> va = ta.to(DType::kFloat64).contiguous().to_vector<double>();
    const std::vector<double> vb =
        b.final_state[i].second.to(Device::cpu(0)).to(DType::kFloat64).contiguous().to_vector<double>();
    for (size_t k = 0; k < va.size() && k < vb.size(); ++k) {
      const double ratio = std::abs(vb[k] - va[k]) / (1e-4 + 1e-3 * std::abs(va[k]));
      const double before = d.state_ratio;
      keep_worst(ratio, d.state_ratio);
      if (d.state_ratio != before) {
        std::ostringstream where;
        where << name << "[" << k << "]: " << va[k] << " against " << vb[k];
        d.worst_state = where.str();
      }
    }
  }
  return d;
}

RunBounds smooth_run_bounds(const std::string& optimizer) {
  if (optimizer == "sgd") return {1e-5, 1e-5, 1e-6, 0.003, 0, 1.0};
  if (optimizer == "adam") return {1e-5, 2e-4, 3e-5, 0.005, 0, INFINITY};
  throw std::invalid_argument("smooth_run_bounds: no bounds for optimizer '" + optimizer + "'");
}

RunBounds relu_run_bounds(const std::string& optimizer) {
  if (optimizer == "sgd" || optimizer == "adam") return {1e-5, 6e-2, 5e-3, 0.02, 0, INFINITY};
  throw std::invalid_argument("relu_run_bounds: no bounds for optimizer '" + optimizer + "'");
}

RunBounds autoencoder_run_bounds() { return {1e-5, 1e-3, 3e-4, 0, 3e-4, INFINITY}; }

std::vector<std::string> violations(const RunDistance& d, const RunBounds& bounds) {
  std::vector<std::string> out;
  auto check = [&](const char* name, double value, double bound) {
    if (!(value <= bound)) {
      std::ostringstream os;
      os << name << " " << value << " > " << bound;
      out.push_back(os.str());
    }
  };
  check("first_loss", d.first_loss, bounds.first_loss);
  check("worst_step_loss", d.worst_step_loss, bounds.worst_step_loss);
  check("train_loss", d.train_loss, bounds.train_loss);
  check("accuracy", d.accuracy, bounds.accuracy);
  check("test_loss", d.test_loss, bounds.test_loss);
  if (std::isfinite(bounds.state_ratio)) check("state_ratio", d.state_ratio, bounds.state_ratio);
  return out;
}

}  // namespace pipewright::testing
