// The model, data, training loop and peak checks of the planner's memory tests
// (planner_memory_test on CPU devices, tests/cuda:planner_memory_test on GPUs): the main job's
// kind of model (Linear, deferred BatchNorm1d, ReLU, Dropout per hidden layer, then a Linear
// and cross-entropy), trained as the examples train: zero_grad (to none), train_step with the
// plan's schedule, Adam's step.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/planner.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"

namespace pipewright::pipeline::planner_testing {

constexpr int64_t kRows = 48, kIn = 24, kHidden = 40, kClasses = 10;

inline nn::Sequential mlp(uint64_t seed, Device device) {
  Generator g(seed);
  GeneratorGuard guard(g);
  const TensorOptions on{.device = device};
  nn::Sequential m;
  int64_t width = kIn;
  for (int k = 0; k < 2; ++k) {
    m.push_back(nn::Linear(width, kHidden, true, on));
    m.push_back(nn::BatchNorm1d(kHidden, 1e-5, 0.1, true, true, on));
    m.push_back(nn::ReLU());
    m.push_back(nn::Dropout(0.2));
    width = kHidden;
  }
  m.push_back(nn::Linear(width, kClasses, true, on));
  return m;
}

struct Batch {
  Tensor x, y;
};

// The data live on a device of their own, as the examples' loader's do.
inline Batch batch(Device data) {
  Generator g(3);
  Tensor x = Tensor::empty({kRows, kIn}, {.device = data});
  g.uniform_(x, -1, 1);
  std::vector<int64_t> labels(kRows);
  for (int64_t i = 0; i < kRows; ++i) labels[static_cast<size_t>(i)] = (i * 7) % kClasses;
  return {x, Tensor::from_vector(labels, Shape{kRows}, data)};
}

inline Tensor cross_entropy(const Tensor& out, const Tensor& target) {
  return nn::cross_entropy(out, target);
}

struct Measured {
  std::vector<int64_t> before;  // per worker's device: allocated() before a step
  std::vector<int64_t> peak;    // its peak over train_step alone (what a plan predicts)
  std::vector<int64_t> peak_with_optimizer;  // its peak over whole steps, Adam's included
};

// Trains three steps as the examples do; measures each worker's device over steps 2 and 3.
inline Measured train(nn::Sequential model, const Plan& plan, const std::vector<Device>& devices,
                      const Batch& b) {
  Pipe pipe(std::move(model), plan.pipe_options(devices));
  nn::Adam adam(pipe.parameters(), {.lr = 1e-3});
  Measured m;
  m.peak.assign(devices.size(), 0);
  m.peak_with_optimizer.assign(devices.size(), 0);
  for (int k = 0; k < 3; ++k) {
    adam.zero_grad();
    if (k == 1) {
      for (const Device& d : devices) m.before.push_back(allocator_for(d).allocated());
    }
    for (const Device& d : devices) allocator_for(d).reset_peak();
    pipe.train_step(b.x, b.y, cross_entropy);
    std::vector<int64_t> step_peaks;
    for (const Device& d : devices) step_peaks.push_back(allocator_for(d).peak());
    pipe.step(adam);
    if (k == 0) continue;  // Adam's state is made in the first step
    for (size_t w = 0; w < devices.size(); ++w) {
      m.peak[w] = std::max(m.peak[w], step_peaks[w]);
      m.peak_with_optimizer[w] =
          std::max(m.peak_with_optimizer[w], allocator_for(devices[w]).peak());
    }
  }
  return m;
}

inline Measured train(const Plan& plan, const std::vector<Device>& devices, const Batch& b) {
  return train(mlp(1, devices.front()), plan, devices, b);
}

inline Plan plan_for(const std::vector<Device>& devices, const std::string& schedule, int chunks,
              int64_t cap = 0, int max_v = 1,
              autograd::Precision precision = autograd::Precision::kFloat32) {
  nn::Sequential model = mlp(1, devices.front());
  const Batch b = batch(Device::cpu(99));
  return plan(model, {b.x, b.y, cross_entropy}, devices,
              {.memory_cap_bytes = cap,
               .schedules = {schedule},
               .chunks = {chunks},
               .max_virtual_stages = max_v,
               .deferred_batch_norm = true,
               .precision = precision});
}

inline int64_t static_bytes(const Plan& p, int w) {
  // Parameters and Adam's two moments of the worker's stages (3x their parameter bytes) and
  // BatchNorm's running statistics.
  nn::Sequential model = mlp(1, Device::cpu(0));
  int64_t bytes = 0;
  int layer = 0;
  for (size_t s = 0; s < p.balance.size(); ++s) {
    for (int k = 0; k < p.balance[s]; ++k, ++layer) {
      if (p.stage_worker[s] != w) continue;
      for (const Tensor& t : model[static_cast<size_t>(layer)].parameters()) {
        bytes += 3 * static_cast<int64_t>(t.nbytes());
      }
      for (const auto& [name, t] : model[static_cast<size_t>(layer)].named_buffers()) {
        bytes += static_cast<int64_t>(t.nbytes());
      }
    }
  }
  return bytes;
}

// With one micro-batch every message is ordered by the schedule: `schedule` planned and
// trained on `devices`, each device holds the static part before a step and peaks at the
// prediction to the byte.
inline void check_exact_peaks(const std::vector<Device>& devices, const std::string& schedule,
                              autograd::Precision precision = autograd::Precision::kFloat32) {
  const Plan p = plan_for(devices, schedule, 1, 0, 1, precision);
  REQUIRE(p.pipe_options(devices).precision == precision);
  REQUIRE(p.exact_memory);
  REQUIRE(p.num_microbatches == 1);
  const Measured m = train(p, devices, batch(Device::cpu(99)));
  for (size_t w = 0; w < devices.size(); ++w) {
    CAPTURE(w, p.explain());
    const DevicePeak& peak = p.peaks[w];
    CHECK(m.before[w] == static_bytes(p, static_cast<int>(w)));
    CHECK(peak.low == peak.high);
    CHECK(m.peak[w] == peak.predicted);
  }
}

// With several micro-batches the messages' timing decides the order: each device's peak lies
// within the predicted bounds (Note [Replaying a device's memory]).
inline void check_peaks_within_bounds(const std::vector<Device>& devices,
                                      const std::string& schedule, int chunks,
                                      autograd::Precision precision = autograd::Precision::kFloat32) {
  const Plan p = plan_for(devices, schedule, chunks, 0, 1, precision);
  const Measured m = train(p, devices, batch(Device::cpu(99)));
  for (size_t w = 0; w < devices.size(); ++w) {
    CAPTURE(w, p.explain());
    const DevicePeak& peak = p.peaks[w];
    CHECK(m.before[w] == static_bytes(p, static_cast<int>(w)));
    CHECK(peak.low <= peak.predicted);
    CHECK(peak.predicted <= peak.high);
    CHECK(peak.low <= m.peak[w]);
    CHECK(m.peak[w] <= peak.high);
  }
}

}  // namespace pipewright::pipeline::planner_testing
