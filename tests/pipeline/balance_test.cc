// Automatic balance (pipeline/balance.h): the block partition against brute force over every
// split, exact activation and parameter bytes of Linear stacks, the expensive layer getting a
// stage of its own, the module left exactly as it was, and the result used by a Pipe.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "autograd/grad_mode.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/balance.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/compare.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;
using pipewright::testing::equal_values;

namespace {

/// Every split of n layers into p non-empty blocks, in lexicographic order of the balance;
/// the first one with the smallest largest block (what block_partition promises).
std::vector<int> brute_force(const std::vector<int64_t>& costs, int p) {
  const int n = static_cast<int>(costs.size());
  std::vector<int> best, current;
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  // Recursion over the first block's size, shortest first: lexicographic order.
  auto rec = [&](auto&& self, int start, int blocks_left, int64_t worst) -> void {
    if (blocks_left == 1) {
      int64_t last = 0;
      for (int i = start; i < n; ++i) last += costs[i];
      const int64_t total = std::max(worst, last);
      current.push_back(n - start);
      if (total < best_cost) best_cost = total, best = current;
      current.pop_back();
      return;
    }
    int64_t block = 0;
    for (int end = start + 1; end + (blocks_left - 1) <= n; ++end) {
      block += costs[end - 1];
      current.push_back(end - start);
      self(self, end, blocks_left - 1, std::max(worst, block));
      current.pop_back();
    }
  };
  rec(rec, 0, p, std::numeric_limits<int64_t>::min());
  return best;
}

struct ModuleSnapshot {
  nn::NamedTensors values;                  // clones of every parameter and buffer
  std::vector<TensorImpl*> impls;           // their identities
  std::vector<const void*> data;            // their storage
  std::vector<TensorImpl*> grads;           // each parameter's .grad impl (null when none)
  std::vector<std::vector<double>> grad_values;
  std::vector<bool> modes;                  // pre-order training flags
};

void collect_modes(const nn::Module& m, std::vector<bool>& out) {
  out.push_back(m.is_training());
  for (const auto& [name, child] : m.children()) collect_modes(*child, out);
}

ModuleSnapshot snapshot(const nn::Module& m) {
  ModuleSnapshot s;
  for (const auto& [name, t] : m.state_dict()) {
    s.values.emplace_back(name, t.clone());
    s.impls.push_back(t.impl());
    s.data.push_back(t.raw_data());
  }
  for (const auto& [name, p] : m.named_parameters()) {
    s.grads.push_back(p.impl()->grad.get());
    s.grad_values.push_back(p.grad().defined() ? p.grad().to_vector<double>()
                                               : std::vector<double>{});
  }
  collect_modes(m, s.modes);
  return s;
}

void require_unchanged(const nn::Module& m, const ModuleSnapshot& s) {
  const nn::NamedTensors now = m.state_dict();
  REQUIRE(now.size() == s.values.size());
  for (size_t i = 0; i < now.size(); ++i) {
    CAPTURE(now[i].first);
    REQUIRE(now[i].first == s.values[i].first);
    REQUIRE(now[i].second.impl() == s.impls[i]);
    REQUIRE(now[i].second.raw_data() == s.data[i]);
    REQUIRE(equal_values(now[i].second, s.values[i].second));
  }
  const nn::NamedTensors params = m.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(params[i].first);
    REQUIRE(params[i].second.impl()->grad.get() == s.grads[i]);
    if (s.grads[i] != nullptr) {
      REQUIRE(equal_values(params[i].second.grad().to_vector<double>(), s.grad_values[i]));
    }
  }
  std::vector<bool> modes;
  collect_modes(m, modes);
  REQUIRE(modes == s.modes);
}

/// A layer that throws in forward (to check that a failed profile restores the module too).
class Explode : public nn::Module {
 public:
  using Module::forward;
  Tensor forward(const Tensor&) override { throw std::runtime_error("boom in layer"); }
  std::string str() const override { return "Explode()"; }
};

nn::Sequential linear_stack(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(16, 64), nn::ReLU(), nn::Linear(64, 64), nn::Linear(64, 8));
}

}  // namespace

// ---- block_partition ----

TEST_CASE("block_partition equals brute force over every split") {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 9)(rng);
    const int p = std::uniform_int_distribution<int>(1, n)(rng);
    // Small ranges make ties (several optimal splits) common; some trials allow negatives.
    const int lo = trial % 3 == 0 ? -6 : 0;
    const int hi = trial % 2 == 0 ? 4 : 100;
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = std::uniform_int_distribution<int>(lo, hi)(rng);
    CAPTURE(costs, p);
    const std::vector<int> got = block_partition(costs, p);
    const std::vector<int> want = brute_force(costs, p);
    REQUIRE(got == want);
    REQUIRE(max_block_cost(costs, got) == max_block_cost(costs, want));
  }
}

TEST_CASE("block_partition edge cases") {
  REQUIRE(block_partition({7, 1, 2}, 1) == std::vector<int>{3});
  REQUIRE(block_partition({7, 1, 2}, 3) == std::vector<int>{1, 1, 1});
  REQUIRE(block_partition(std::vector<int64_t>(12, 1), 4) == std::vector<int>{3, 3, 3, 3});
  // All zero: every split is optimal; the lexicographically smallest is returned.
  REQUIRE(block_partition({0, 0, 0, 0}, 2) == std::vector<int>{1, 3});
  // Ties: {1,3}, {2,2}, {3,1} all have largest block 5.
  REQUIRE(block_partition({5, 0, 0, 5}, 2) == std::vector<int>{1, 3});
  // A negative cost may sit with the expensive layer: [9, -4 | 6] has largest block 6.
  REQUIRE(block_partition({9, -4, 6}, 2) == std::vector<int>{2, 1});
  REQUIRE(max_block_cost({9, -4, 6}, {2, 1}) == 6);
  // One dominant layer gets a block of its own.
  REQUIRE(block_partition({1, 1, 100, 1, 1}, 3) == std::vector<int>{2, 1, 2});
  // Large enough to matter, still fast: 300 layers, 8 partitions; optimum of 300 ones is 38.
  const std::vector<int> big = block_partition(std::vector<int64_t>(300, 1), 8);
  REQUIRE(big.size() == 8);
  REQUIRE(max_block_cost(std::vector<int64_t>(300, 1), big) == 38);
}

TEST_CASE("block_partition errors name the values") {
  REQUIRE_THROWS_MATCHES(block_partition({1, 2, 3}, 5), std::invalid_argument,
                         Catch::Message("more partitions than layers (partitions: 5, layers: 3)"));
  REQUIRE_THROWS_MATCHES(block_partition({}, 1), std::invalid_argument,
                         Catch::Message("more partitions than layers (partitions: 1, layers: 0)"));
  REQUIRE_THROWS_MATCHES(block_partition({1, 2}, 0), std::invalid_argument,
                         Catch::Message("number of partitions must be positive (partitions: 0)"));
  REQUIRE_THROWS_WITH(block_partition({1, 2}, -3), Catch::Contains("partitions: -3"));
  REQUIRE_THROWS_WITH(max_block_cost({1, 2}, {1, 0, 1}), Catch::Contains("[1, 0, 1]"));
  REQUIRE_THROWS_WITH(max_block_cost({1, 2}, {3}),
                      Catch::Contains("costs: 2, sum of balance: 3"));
}

// ---- balance_by_size: exact bytes ----

TEST_CASE("balance_by_parameters cuts blocks that start at a weight matrix") {
  // Linear(8,6) BN(6) ReLU Dropout | Linear(6,6) BN(6) ReLU | Linear(6,2): parameters 54 + 12,
  // 42 + 12, 14; block costs (parameters + layers) 70, 57, 15.
  nn::Sequential mlp;
  mlp.push_back(nn::Linear(8, 6));
  mlp.push_back(nn::BatchNorm1d(6));
  mlp.push_back(nn::ReLU());
  mlp.push_back(nn::Dropout(0.1));
  mlp.push_back(nn::Linear(6, 6));
  mlp.push_back(nn::BatchNorm1d(6));
  mlp.push_back(nn::ReLU());
  mlp.push_back(nn::Linear(6, 2));
  // Two stages: {70 | 57 + 15 = 72} beats {70 + 57 | 15}; three: a block each.
  CHECK(balance_by_parameters(2, mlp) == std::vector<int>{4, 4});
  CHECK(balance_by_parameters(3, mlp) == std::vector<int>{4, 3, 1});
  // More partitions than the 3 blocks: the layers are cut, each costing parameters + 1
  // (55 13 1 1 43 13 1 15): the optimum's largest stage is the first Linear, 55.
  const std::vector<int> four = balance_by_parameters(4, mlp);
  CHECK(max_block_cost({55, 13, 1, 1, 43, 13, 1, 15}, four) == 55);
  CHECK(four == block_partition({55, 13, 1, 1, 43, 13, 1, 15}, 4));

  // Where the layer-level cut strands the cheap layers: a big first Linear. Layer costs
  // 401,921 (Linear 784x512 + 1) 1,025 1 1 262,657 1,025 1 1 5,131: the layer-level optimum
  // is the first Linear alone (1 | 8); the block cut keeps its BatchNorm, ReLU and Dropout
  // with it (4 | 5), as the main job's default.
  nn::Sequential big;
  big.push_back(nn::Linear(784, 512));
  big.push_back(nn::BatchNorm1d(512));
  big.push_back(nn::ReLU());
  big.push_back(nn::Dropout(0.2));
  big.push_back(nn::Linear(512, 512));
  big.push_back(nn::BatchNorm1d(512));
  big.push_back(nn::ReLU());
  big.push_back(nn::Dropout(0.2));
  big.push_back(nn::Linear(512, 10));
  CHECK(block_partition({401921, 1025, 1, 1, 262657, 1025, 1, 1, 5131}, 2) ==
        std::vector<int>{1, 8});
  CHECK(balance_by_parameters(2, big) == std::vector<int>{4, 5});

  // Leading layers without a matrix join the first block; a model without any is cut by
  // layer count.
  nn::Sequential lead;
  lead.push_back(nn::ReLU());
  lead.push_back(nn::Dropout(0.1));
  lead.push_back(nn::Linear(4, 4));
  lead.push_back(nn::ReLU());
  lead.push_back(nn::Linear(4, 4));
  CHECK(balance_by_parameters(2, lead) == std::vector<int>{4, 1});
  nn::Sequential plain;
  for (int i = 0; i < 6; ++i) plain.push_back(nn::ReLU());
  CHECK(balance_by_parameters(3, plain) == std::vector<int>{2, 2, 2});

  // A residual MLP: stem | Stash Linear ReLU Pop | Stash Linear ReLU Pop | head. The stashes
  // open the residual blocks, so the cuts fall between them and each skip stays on one stage.
  // Blocks (parameters + layers): [L ReLU] 74, [Stash L ReLU Pop] 76, [Stash L ReLU Pop] 76,
  // [L] 19. Without the stash rule each Stash would close the block before it and every cut
  // would separate a Stash from its Pop: {3, 4, 4}.
  nn::Sequential res;
  res.push_back(nn::Linear(8, 8));
  res.push_back(nn::ReLU());
  for (const char* name : {"a", "b"}) {
    res.push_back(Stash(name));
    res.push_back(nn::Linear(8, 8));
    res.push_back(nn::ReLU());
    res.push_back(Pop(name));
  }
  res.push_back(nn::Linear(8, 2));
  CHECK(balance_by_parameters(3, res) == std::vector<int>{2, 4, 5});
  CHECK(balance_by_parameters(2, res) == std::vector<int>{6, 5});  // {150 | 95}

  CHECK_THROWS_WITH(balance_by_parameters(0, mlp),
                    Catch::Contains("number of partitions must be positive (partitions: 0)"));
  CHECK_THROWS_WITH(balance_by_parameters(9, mlp),
                    Catch::Contains("more partitions than layers (partitions: 9, layers: 8)"));
}

TEST_CASE("profile_sizes of a Linear stack is exact, and balance_by_size splits it by hand") {
  // Linear(16,64) ReLU Linear(64,64) Linear(64,8), float32, with bias. A layer's activation
  // is its output (Linear saves its input and weight, ReLU its output: no new bytes), so for
  // a micro-batch of n rows: 4·n·64, 4·n·64, 4·n·64, 4·n·8 bytes. Parameters:
  // 4·(16·64 + 64) = 4352, 0, 4·(64·64 + 64) = 16640, 4·(64·8 + 8) = 2080 bytes.
  const Device dev = Device::cpu(40);
  nn::Sequential model = linear_stack(1);
  model.to(dev);

  SECTION("64 rows, one chunk: activations dominate without parameters") {
    const Tensor x = randn({64, 16}, 2, dev);
    const std::vector<LayerSize> s =
        profile_sizes(model, {x}, {.device = dev, .chunks = 1, .param_scale = 0});
    REQUIRE(s.size() == 4);
    const std::vector<int64_t> act{16384, 16384, 16384, 2048}, par{4352, 0, 16640, 2080};
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      REQUIRE(s[i].activation_bytes == act[i]);
      REQUIRE(s[i].parameter_bytes == par[i]);
      REQUIRE(s[i].cost == act[i]);
      REQUIRE(s[i].peak_bytes >= s[i].activation_bytes);
    }
    // Costs [16384, 16384, 16384, 2048]: {1,1,2} -> 18432; {1,2,1}, {2,1,1} -> 32768.
    REQUIRE(balance_by_size(3, model, x, {.device = dev, .param_scale = 0}) ==
            std::vector<int>{1, 1, 2});
    // Adam-like param_scale 5: costs [38144, 16384, 99584, 12448]:
    // {1,1,2} -> 112032, {1,2,1} -> 115968, {2,1,1} -> 99584.
    REQUIRE(balance_by_size(3, model, x, {.device = dev, .param_scale = 5}) ==
            std::vector<int>{2, 1, 1});
  }

  SECTION("7 rows in 2 chunks: the first (largest) micro-batch of 4 rows is profiled") {
    const Tensor x = randn({7, 16}, 3, dev);
    const std::vector<LayerSize> s =
        profile_sizes(model, {x}, {.device = dev, .chunks = 2, .param_scale = 2});
    const std::vector<int64_t> act{1024, 1024, 1024, 128};
    const std::vector<int64_t> cost{1024 + 8704, 1024, 1024 + 33280, 128 + 4160};
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      REQUIRE(s[i].activation_bytes == act[i]);
      REQUIRE(s[i].cost == cost[i]);
    }
    // Costs [9728, 1024, 34304, 4288]: {1,3} -> 39616, {2,2} -> 38592, {3,1} -> 45056.
    REQUIRE(balance_by_size(2, model, x, {.device = dev, .chunks = 2}) ==
            std::vector<int>{2, 2});
    // {1,1,2} -> 38592, {1,2,1} -> 35328, {2,1,1} -> 34304.
    REQUIRE(balance_by_size(3, model, x, {.device = dev, .chunks = 2}) ==
            std::vector<int>{2, 1, 1});
  }
  // The profile released everything it allocated: only the model and the samples remain.
  REQUIRE(allocator_for(dev).allocated() == (4352 + 16640 + 2080));
}

// ---- balance_by_time ----

TEST_CASE("balance_by_time gives a much more expensive layer a stage of its own") {
  // The nested block costs ~64x a 64x64 Linear (two 64x2048 GEMMs per pass): noise on a busy
  // 2-core machine does not change the optimum, and no time is compared with a threshold.
  Generator g(4);
  GeneratorGuard guard(g);
  auto big = [] {
    return nn::Sequential(nn::Linear(64, 2048), nn::ReLU(), nn::Linear(2048, 64));
  };
  const Tensor x = randn({32, 64}, 5);

  SECTION("tiny tiny BIG tiny tiny over 3 stages") {
    nn::Sequential model(nn::Linear(64, 64), nn::Linear(64, 64), big(), nn::Linear(64, 64),
                         nn::Linear(64, 64));
    const std::vector<int64_t> t = profile_times(model, {x});
    REQUIRE(t.size() == 5);
    for (int i : {0, 1, 3, 4}) REQUIRE(t[i] < t[2]);
    REQUIRE(balance_by_time(3, model, x, {.warmup = 1, .repetitions = 3}) ==
            std::vector<int>{2, 1, 2});
  }
  SECTION("BIG first over 2 stages") {
    nn::Sequential model(big(), nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, 64));
    REQUIRE(balance_by_time(2, model, x) == std::vector<int>{1, 3});
  }
}

TEST_CASE("profile_times handles layers whose outputs do not require grad") {
  const Tensor x = randn({8, 4}, 6);  // data: no grad
  SECTION("no parameters at all: forward only") {
    nn::Sequential model{nn::ReLU(), nn::Tanh()};
    const std::vector<int64_t> t = profile_times(model, {x}, {.warmup = 0, .repetitions = 1});
    REQUIRE(t.size() == 2);
    REQUIRE(t[0] >= 0);
    REQUIRE(t[1] >= 0);
    REQUIRE(balance_by_time(2, model, x) == std::vector<int>{1, 1});
  }
  SECTION("a parameter-free first layer, then Linear; an input that requires grad keeps no grad") {
    nn::Sequential model = small_mlp(7);
    nn::Sequential model2{nn::ReLU(), nn::Linear(4, 4)};
    REQUIRE(profile_times(model2, {x}).size() == 2);
    Tensor xg = x.clone().set_requires_grad(true);
    REQUIRE(profile_times(model, {xg}).size() == 5);
    REQUIRE_FALSE(xg.grad().defined());
  }
}

// ---- the module is left as it was ----

TEST_CASE("profiling leaves parameters, .grad, buffers, modes and randomness as they were") {
  Generator init(8);
  nn::Sequential model = [&] {
    GeneratorGuard guard(init);
    return nn::Sequential(nn::Linear(8, 16), nn::BatchNorm1d(16), nn::ReLU(),
                          nn::Dropout(0.5), nn::Linear(16, 4));
  }();
  // Mixed modes: the model trains, but BatchNorm is in eval (the profile runs it in training
  // mode, which updates running statistics: they must come back).
  model.train();
  model[1].eval();
  // One parameter already has a gradient (must keep its values and identity); the others have
  // none (none may be created).
  Tensor w0 = model.named_parameters()[0].second;
  w0.set_grad(Tensor::full(w0.shape(), 0.25));
  const Tensor x = randn({10, 8}, 9);

  current_generator().set_state(77, 12);
  const uint64_t default_seed = default_generator().seed(),
                 default_offset = default_generator().offset();
  const ModuleSnapshot before = snapshot(model);

  {
    autograd::NoGradGuard no_grad;  // the caller's grad mode is off; the profile needs it on
    REQUIRE(profile_times(model, {x}, {.warmup = 1, .repetitions = 2}).size() == 5);
    REQUIRE(profile_sizes(model, {x}, {.chunks = 2}).size() == 5);
    REQUIRE(balance_by_time(2, model, x).size() == 2);
    REQUIRE(balance_by_size(3, model, x).size() == 3);
    REQUIRE_FALSE(autograd::grad_mode_enabled());
  }
  require_unchanged(model, before);
  REQUIRE(current_generator().seed() == 77);
  REQUIRE(current_generator().offset() == 12);
  REQUIRE(default_generator().seed() == default_seed);
  REQUIRE(default_generator().offset() == default_offset);
  REQUIRE(autograd::grad_mode_enabled());
  REQUIRE_FALSE(autograd::is_recomputing());

  SECTION("a layer that throws: the exception passes, the state is restored") {
    nn::Sequential failing;
    failing.push_back_shared(model.ptr(0));
    failing.push_back_shared(model.ptr(1));
    failing.push_back(Explode());
    failing.eval();  // the shared children are now in eval; snapshot that
    const ModuleSnapshot before_fail = snapshot(failing);
    REQUIRE_THROWS_WITH(profile_times(failing, {x}), "boom in layer");
    require_unchanged(failing, before_fail);
    REQUIRE_THROWS_WITH(profile_sizes(failing, {x}), "boom in layer");
    require_unchanged(failing, before_fail);
    REQUIRE(current_generator().offset() == 12);
  }

  SECTION("the check is not vacuous: a training forward does change what was restored") {
    model.train();
    model.forward(x).backward(Tensor::ones({10, 4}));
    const nn::NamedTensors now = model.state_dict();
    bool buffers_changed = false;
    for (size_t i = 0; i < now.size(); ++i) {
      if (now[i].first.find("running_mean") != std::string::npos) {
        buffers_changed = now[i].second.to_vector<double>() !=
                          before.values[i].second.to_vector<double>();
      }
    }
    REQUIRE(buffers_changed);
    REQUIRE(current_generator().offset() != 12);  // Dropout drew from the caller's generator
    REQUIRE(model.named_parameters()[1].second.grad().defined());  // 0.bias got a .grad
  }
}

TEST_CASE("a deferred BatchNorm keeps its accumulated sums through a profile") {
  nn::Sequential model(nn::Linear(4, 4), nn::BatchNorm1d(4));
  auto& deferred = dynamic_cast<nn::BatchNorm1d&>(model[1]);
  deferred.set_deferred(true);
  model.forward(randn({6, 4}, 10));
  REQUIRE(deferred.deferred_count() == 6);
  const ModuleSnapshot before = snapshot(model);
  profile_times(model, {randn({5, 4}, 11)}, {.warmup = 0, .repetitions = 1});
  profile_sizes(model, {randn({5, 4}, 11)});
  require_unchanged(model, before);
  REQUIRE(deferred.is_deferred());
  REQUIRE(deferred.deferred_count() == 6);
}

// ---- errors ----

TEST_CASE("balance errors name the values") {
  nn::Sequential model = small_mlp(12);
  const Tensor x = randn({4, 4}, 13);
  REQUIRE_THROWS_MATCHES(balance_by_time(0, model, x), std::invalid_argument,
                         Catch::Message("number of partitions must be positive (partitions: 0)"));
  REQUIRE_THROWS_MATCHES(balance_by_size(-2, model, x), std::invalid_argument,
                         Catch::Message("number of partitions must be positive (partitions: -2)"));
  REQUIRE_THROWS_MATCHES(balance_by_time(6, model, x), std::invalid_argument,
                         Catch::Message("more partitions than layers (partitions: 6, layers: 5)"));
  REQUIRE_THROWS_MATCHES(balance_by_size(6, model, x), std::invalid_argument,
                         Catch::Message("more partitions than layers (partitions: 6, layers: 5)"));
  nn::Sequential empty;
  REQUIRE_THROWS_MATCHES(balance_by_time(1, empty, x), std::invalid_argument,
                         Catch::Message("balance_by_time: the module has no layers (empty "
                                        "Sequential)"));
  REQUIRE_THROWS_WITH(balance_by_size(1, empty, x), Catch::Contains("no layers"));
  REQUIRE_THROWS_WITH(profile_times(empty, {x}), Catch::Contains("no layers"));

  // Devices: the sample, then the module, must be on options.device.
  const Tensor x1 = randn({4, 4}, 13, Device::cpu(41));
  REQUIRE_THROWS_MATCHES(
      balance_by_time(2, model, x1), std::invalid_argument,
      Catch::Message("profile_times: sample[0] is on cpu:41 but the profile runs on cpu:0"));
  REQUIRE_THROWS_WITH(balance_by_size(2, model, x1),
                      "profile_sizes: sample[0] is on cpu:41 but the profile runs on cpu:0");
  REQUIRE_THROWS_WITH(balance_by_time(2, model, x1, {.device = Device::cpu(41)}),
                      Catch::Contains("module tensor '0.weight' is on cpu:0 but the profile "
                                      "runs on cpu:41"));
  REQUIRE_THROWS_WITH(balance_by_time(2, model, Tensor()), Catch::Contains("undefined"));

  REQUIRE_THROWS_WITH(balance_by_size(2, model, x, {.chunks = 0}), Catch::Contains("chunks: 0"));
  REQUIRE_THROWS_WITH(balance_by_size(2, model, x, {.param_scale = -1}),
                      Catch::Contains("param_scale: -1"));
  REQUIRE_THROWS_WITH(balance_by_size(2, model, Tensor::scalar(1.0)), Catch::Contains("scalar"));
  REQUIRE_THROWS_WITH(balance_by_time(2, model, x, {.repetitions = 0}),
                      Catch::Contains("repetitions: 0"));
  REQUIRE_THROWS_WITH(balance_by_time(2, model, x, {.warmup = -1}), Catch::Contains("warmup: -1"));
}

// ---- the result drives a Pipe ----

TEST_CASE("a computed balance runs in a Pipe that equals the plain model") {
  constexpr double kTol = 2e-6;
  const int chunks = 4;
  const Tensor x0 = randn({8, 4}, 14);
  const Tensor target = randn({8, 3}, 15);

  nn::Sequential profiled = small_mlp(11);
  // small_mlp on a micro-batch of 2 rows, param_scale 2: Linear(4,8) 64 + 2·160, ReLU 64,
  // Linear(8,8) 64 + 2·288, Tanh 64, Linear(8,3) 24 + 2·108 = [384, 64, 640, 64, 240]:
  // {2,3} -> 944 beats {1,4} -> 1008, {3,2} -> 1088, {4,1} -> 1152.
  const std::vector<int> by_size = balance_by_size(2, profiled, x0, {.chunks = chunks});
  REQUIRE(by_size == std::vector<int>{2, 3});
  const std::vector<int> by_time = balance_by_time(3, profiled, x0.chunk(chunks)[0]);
  REQUIRE(by_time.size() == 3);

  for (const std::vector<int>& balance : {by_size, by_time}) {
    CAPTURE(balance);
    nn::Sequential plain = small_mlp(11);
    Tensor xp = x0.clone().set_requires_grad(true);
    Tensor ref_out = plain.forward(xp);
    Tensor ref_loss = nn::mse_loss(ref_out, target);
    ref_loss.backward();

    // The profiled model itself goes into the Pipe: profiling must not have changed it.
    nn::Sequential model = small_mlp(11);
    balance_by_time(static_cast<int>(balance.size()), model, x0.chunk(chunks)[0]);
    balance_by_size(static_cast<int>(balance.size()), model, x0, {.chunks = chunks});
    Pipe pipe(std::move(model), {.balance = balance,
                                 .devices = cpus(42, static_cast<int>(balance.size())),
                                 .chunks = chunks});
    Tensor x = x0.clone().set_requires_grad(true);
    Tensor out = pipe.forward(x);
    Tensor loss = nn::mse_loss(out, target.to(out.device()));
    loss.backward();
    REQUIRE(max_diff(out, ref_out) <= kTol);
    REQUIRE(std::abs(loss.item() - ref_loss.item()) <= kTol);
    REQUIRE(max_diff(x.grad(), xp.grad()) <= kTol);
    REQUIRE(max_grad_diff(pipe.module(), plain) <= kTol);
  }
}
