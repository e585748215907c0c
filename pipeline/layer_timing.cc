// time_layers (layer_timing.h): per-layer F, B, I and W in a step's order.
#include "pipeline/layer_timing.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "autograd/engine.h"
#include "pipeline/median.h"
#include "pipeline/profile_state.h"
#include "tensor/stream.h"

namespace pipewright::pipeline {

void roots_of(const nn::Tensors& outputs, nn::Tensors& roots, nn::Tensors& grads) {
  for (const Tensor& t : outputs) {
    if (t.defined() && t.requires_grad() && t.grad_fn() != nullptr) {
      roots.push_back(t);
      grads.push_back(Tensor::ones(t.shape(), {t.dtype(), t.device()}));
    }
  }
}

nn::Tensors requiring_grad(const nn::Tensors& tensors) {
  nn::Tensors out;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.requires_grad()) out.push_back(t);
  }
  return out;
}

void ProfileSkipTracker::stash(const nn::Module&, const nn::SkipKey& key, const Tensor& tensor) {
  stashed_[key] = tensor;
}

Tensor ProfileSkipTracker::pop(const nn::Module& layer, const nn::SkipKey& key) {
  if (auto it = stashed_.find(key); it != stashed_.end()) {
    Tensor t = std::move(it->second);
    stashed_.erase(it);
    popped_[key] = detach_like({t}).front();
    return t;
  }
  if (auto it = popped_.find(key); it != popped_.end()) return it->second;
  throw std::logic_error("profile: " + layer.str() + " pops " + key.str() +
                         ", which no earlier layer stashed");
}

std::vector<LayerTimes> time_layers(const std::vector<ProfiledLayer>& layers,
                                    const std::vector<nn::Tensors>& parameters,
                                    const std::function<nn::Tensors()>& first_input,
                                    Device device, const LayerTimingOptions& options) {
  if (parameters.size() != layers.size()) {
    throw std::invalid_argument("time_layers: " + std::to_string(parameters.size()) +
                                " parameter lists for " + std::to_string(layers.size()) +
                                " layers");
  }
  if (options.warmup < 0) {
    throw std::invalid_argument("time_layers: warmup must be >= 0 (warmup: " +
                                std::to_string(options.warmup) + ")");
  }
  if (options.repetitions < 1) {
    throw std::invalid_argument("time_layers: repetitions must be positive (repetitions: " +
                                std::to_string(options.repetitions) + ")");
  }
  ProfileSkipTracker skips;  // Note [Skips in the profile]
  nn::SkipTrackerGuard skip_guard(skips);
  using Clock = std::chrono::steady_clock;
  const Stream stream = Stream::current(device);
  const int repeats = device.is_cpu() ? 1 : kDeviceRepeats;
  const size_t n = layers.size();
  // The wall time of part(0) ... part(repeats - 1), queued back to back, per part, in µs.
  const auto time_parts = [&](const std::function<void(int)>& part) {
    stream.synchronize();
    const auto t0 = Clock::now();
    for (int r = 0; r < repeats; ++r) part(r);
    stream.synchronize();
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / repeats;
  };
  struct Graph {
    nn::Tensors roots, grads;
  };
  std::vector<nn::Tensors> inputs(n);                          // layer i's (detached) input
  std::vector<std::vector<Graph>> graphs(n, std::vector<Graph>(static_cast<size_t>(repeats)));
  // Graph r of layer i: from `out` (a forward already run) or from a fresh forward.
  const auto set_graph = [&](size_t i, int r, const nn::Tensors& out) {
    Graph& g = graphs[i][static_cast<size_t>(r)];
    g = Graph{};
    roots_of(out, g.roots, g.grads);
  };
  // On a GPU, graphs 1 .. repeats - 1 of layer i, made just before its backward is timed
  // (one layer's extra graphs at a time, not the whole model's).
  const auto add_repeat_graphs = [&](size_t i) {
    for (int r = 1; r < repeats; ++r) set_graph(i, r, layers[i](inputs[i]));
  };
  std::vector<std::vector<double>> f(n), b(n), in(n), w(n);
  for (int pass = 0; pass < options.warmup + options.repetitions; ++pass) {
    std::vector<double> forward(n, 0), whole(n, 0), input_half(n, 0), weight_half(n, 0);
    // F through every layer; each keeps its graph for B.
    nn::Tensors x = first_input();
    for (size_t i = 0; i < n; ++i) {
      inputs[i] = x;
      nn::Tensors y;
      forward[i] = time_parts([&](int) { y = layers[i](x); });
      set_graph(i, 0, y);
      x = detach_like(y);
    }
    // B from the last layer to the first (the gradients returned, not kept).
    for (size_t i = n; i-- > 0;) {
      if (graphs[i][0].roots.empty()) continue;
      add_repeat_graphs(i);
      nn::Tensors wanted = requiring_grad(inputs[i]);
      wanted.insert(wanted.end(), parameters[i].begin(), parameters[i].end());
      whole[i] = time_parts([&](int r) {
        const Graph& g = graphs[i][static_cast<size_t>(r)];
        autograd::backward(g.roots, g.grads, wanted);
      });
    }
    if (options.split_backward) {
      // The B/W split on fresh graphs: every I from the last layer to the first, then every W
      // from the queues (into .grad, cleared after).
      for (size_t i = 0; i < n; ++i) set_graph(i, 0, layers[i](inputs[i]));
      std::vector<std::vector<autograd::WeightGradQueue>> queues(n);
      for (size_t i = n; i-- > 0;) {
        queues[i].resize(static_cast<size_t>(repeats));
        if (graphs[i][0].roots.empty()) continue;
        add_repeat_graphs(i);
        const nn::Tensors wanted = requiring_grad(inputs[i]);
        input_half[i] = time_parts([&](int r) {
          const Graph& g = graphs[i][static_cast<size_t>(r)];
          autograd::backward(g.roots, g.grads, wanted,
                             {.defer_weight_grads = &queues[i][static_cast<size_t>(r)]});
        });
      }
      for (size_t i = n; i-- > 0;) {
        if (graphs[i][0].roots.empty()) continue;
        weight_half[i] = time_parts([&](int r) { queues[i][static_cast<size_t>(r)].run(); });
        for (Tensor p : parameters[i]) p.set_grad(Tensor());
      }
    }
    for (auto& layer_graphs : graphs) {
      for (Graph& g : layer_graphs) g = Graph{};
    }
    if (pass < options.warmup) continue;
    for (size_t i = 0; i < n; ++i) {
      f[i].push_back(forward[i]);
      b[i].push_back(whole[i]);
      in[i].push_back(input_half[i]);
      w[i].push_back(weight_half[i]);
    }
  }
  std::vector<LayerTimes> times(n);
  for (size_t i = 0; i < n; ++i) {
    times[i] = {median(f[i]), median(b[i]), median(in[i]), median(w[i])};
  }
  return times;
}

}  // namespace pipewright::pipeline
