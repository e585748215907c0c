// End-to-end: the Fashion-MNIST example on a slice of the real data (Debian's
// dataset-fashion-mnist, installed by tools/bazel).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "examples/common/example_main.h"
#include "examples/common/flags.h"
#include "examples/fashion_mnist/trainer.h"
#include "nn/linear.h"
#include "nn/activation.h"
#include "nn/safetensors.h"
#include "tensor/matmul_precision.h"
#include "tensor/ops.h"
#include "tests/compare.h"

using pipewright::Tensor;
using pipewright::examples::TrainConfig;
using pipewright::examples::train;
using pipewright::testing::bitwise_equal;

namespace {

TrainConfig small_config() {
  TrainConfig c;
  c.epochs = 2;
  c.batch_size = 50;
  c.hidden = {64};
  c.dropout = 0.1;
  c.chunks = 4;
  c.checkpoint = pipewright::pipeline::Checkpoint::kExceptLast;  // recompute with dropout too
  c.train_limit = 600;
  c.test_limit = 300;
  c.progress = false;
  c.seed = 7;
  return c;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

}  // namespace

TEST_CASE("training on a slice of Fashion-MNIST lowers the loss and beats chance by far") {
  std::ostringstream log;
  auto result = train(small_config(), log);
  REQUIRE(result.epochs.size() == 2);
  INFO(log.str());
  CHECK(result.epochs[0].train_loss < 2.3026);  // below chance: ln(10)
  CHECK(result.epochs[1].train_loss < result.epochs[0].train_loss);
  CHECK(result.epochs[1].test_accuracy > 0.6);   // chance is 0.1
  CHECK(result.epochs[1].peak_bytes.size() == 2);
  CHECK(result.epochs[1].peak_bytes[0] > 0);
  CHECK(log.str().find("test acc") != std::string::npos);
}

TEST_CASE("the run reports busy time per stage and the replayed bubble; --trace-step") {
  TrainConfig c = small_config();  // 600 images in mini-batches of 50: 12 steps per epoch
  c.trace = temp_path("step14.json");
  c.trace_step = 14;               // the second step of epoch 2
  std::remove(c.trace.c_str());
  std::ostringstream log;
  auto result = train(c, log);
  INFO(log.str());
  for (const auto& e : result.epochs) {
    REQUIRE(e.busy_ms.size() == 2);
    CHECK(e.busy_ms[0] > 0);
    CHECK(e.busy_ms[1] > 0);
    // The replay keeps the measured durations and drops the hand-offs' cost: GPipe's fill and
    // drain stay (a bubble > 0), and it is not above the measured bubble but for clock jitter
    // (a receiver may start before its sender has stamped the end of its action).
    CHECK(e.bubble_replayed > 0);
    CHECK(e.bubble_replayed < 1);
    CHECK(e.bubble_replayed <= e.bubble + 0.05);
  }
  CHECK(log.str().find("steady state (epoch 2): busy per step cpu:0 ") != std::string::npos);
  CHECK(log.str().find("replayed with the measured durations") != std::string::npos);
  CHECK(log.str().find("trace of step 14 written to " + c.trace) != std::string::npos);
  std::ifstream trace(c.trace);
  const std::string json((std::istreambuf_iterator<char>(trace)), std::istreambuf_iterator<char>());
  CHECK(json.find("\"traceEvents\"") != std::string::npos);

  c.trace_step = 25;  // the run has 24 steps
  c.epochs = 2;
  std::ostringstream past;
  train(c, past);
  CHECK(past.str().find("no trace written: --trace-step 25 is past the run's 24 steps") !=
        std::string::npos);
  c.trace_step = 0;
  CHECK_THROWS_WITH(train(c, past), Catch::Contains("--trace-step 0: must be at least 1"));
}

namespace {

// The runs the resume tests interrupt and continue.
TrainConfig three_short_epochs() {
  TrainConfig c = small_config();
  c.epochs = 3;
  c.train_limit = 200;
  c.test_limit = 100;
  return c;
}

}  // namespace

TEST_CASE("resuming from a checkpoint equals training straight through, bit for bit") {
  std::ostringstream log;
  const TrainConfig straight = three_short_epochs();
  auto full = train(straight, log);

  TrainConfig first = straight;
  first.stop_after = 1;  // as if interrupted after epoch 1 of 3
  first.save = temp_path("fashion_mnist_resume.safetensors");
  train(first, log);
  TrainConfig rest = straight;
  rest.resume = first.save;
  auto resumed = train(rest, log);

  REQUIRE(resumed.epochs.size() == 2);
  REQUIRE(full.final_state.size() == resumed.final_state.size());
  CHECK(bitwise_equal(full.final_state, resumed.final_state));
  CHECK(full.epochs[2].train_loss == resumed.epochs[1].train_loss);
}

TEST_CASE("a checkpoint resumes under another cut, continuing the run to float rounding") {
  // Saved with 2 stages and GPipe; resumed with 3 stages and 1F1B (the model and optimizer
  // state by name, Dropout's keyed masks by the random step). The micro-batches stay: deferred
  // BatchNorm normalises each with its own statistics, so chunks are part of the model.
  std::ostringstream log;
  const TrainConfig straight = three_short_epochs();
  auto full = train(straight, log);

  TrainConfig first = straight;
  first.stop_after = 1;
  first.save = temp_path("fashion_mnist_recut.safetensors");
  train(first, log);
  TrainConfig rest = straight;
  rest.resume = first.save;
  rest.workers = 3;
  rest.schedule = "1f1b";
  auto resumed = train(rest, log);
  INFO(log.str());

  REQUIRE(resumed.epochs.size() == 2);
  for (size_t e = 0; e < 2; ++e) {
    CHECK(std::abs(resumed.epochs[e].train_loss - full.epochs[e + 1].train_loss) <=
          1e-4 * full.epochs[e + 1].train_loss);
  }
  for (size_t i = 0; i < full.final_state.size(); ++i) {
    INFO(full.final_state[i].first);
    const Tensor& want = full.final_state[i].second;
    if (!pipewright::is_floating(want.dtype())) {  // BatchNorm's step count
      CHECK(pipewright::ops::equal(resumed.final_state[i].second, want));
      continue;
    }
    CHECK(pipewright::ops::max_abs_diff(resumed.final_state[i].second, want) <= 1e-3);
  }
}

TEST_CASE("the same seed gives the same run; bad flags are refused with their values") {
  std::ostringstream log;
  TrainConfig c = small_config();
  c.epochs = 1;
  c.train_limit = 100;
  c.test_limit = 50;
  auto a = train(c, log);
  auto b = train(c, log);
  CHECK(a.epochs[0].train_loss == b.epochs[0].train_loss);

  c.balance = {1, 1};
  CHECK_THROWS_WITH(train(c, log), Catch::Contains("--balance 1,1") && Catch::Contains("sums to 2"));
  c.balance = {};
  c.chunks = 0;
  CHECK_THROWS_WITH(train(c, log), Catch::Contains("--chunks 0"));
}

TEST_CASE("the default cut keeps each Linear with its BatchNorm, ReLU and Dropout") {
  using pipewright::examples::choose_balance;
  TrainConfig c = small_config();
  c.hidden = {64, 64};
  c.dropout = 0.2;
  auto model = pipewright::examples::build_model(c.hidden, c.dropout, 0);
  // Not read: the default cut profiles nothing.
  const pipewright::data::Dataset none(
      pipewright::Tensor::zeros({1, 784}),
      pipewright::Tensor::zeros({1}, {.dtype = pipewright::DType::kInt64}));
  // (Linear BN ReLU Dropout) x 2, Linear: blocks of 50,240 + 128, 4,160 + 128 and 650
  // parameters; two stages: the first block | the rest (the first Linear alone, 1 | 8, was
  // the layer-level cut).
  c.workers = 2;
  CHECK(choose_balance(c, model, none) == std::vector<int>{4, 5});
  c.workers = 3;
  CHECK(choose_balance(c, model, none) == std::vector<int>{4, 4, 1});
  c.workers = 9;  // more stages than blocks: one layer each
  CHECK(choose_balance(c, model, none) == std::vector<int>(9, 1));
}

TEST_CASE("--balance auto-size and auto-time profile the model and cut it") {
  using pipewright::examples::choose_balance;
  auto model = pipewright::examples::build_model({64, 64}, 0.0, 0);
  const auto before = model.parameters().front().clone();
  // 8 images of 784 pixels; labels are not used by the profile.
  pipewright::data::Dataset images(pipewright::Tensor::ones({8, 784}),
                                   pipewright::Tensor::zeros({8}, {.dtype = pipewright::DType::kInt64}));
  TrainConfig c = small_config();
  c.batch_size = 8;
  c.chunks = 2;
  c.optimizer = "adam";
  c.auto_balance = "size";
  // By size the first Linear's 50,240 parameters x 4 bytes x 5 (Adam) outweigh everything
  // else (the other layers hold 5,066 parameters; one micro-batch's activations are a few KiB).
  CHECK(choose_balance(c, model, images) == std::vector<int>{1, 6});
  c.workers = 3;
  const auto three = choose_balance(c, model, images);
  REQUIRE(three.size() == 3);
  CHECK(three[0] == 1);
  CHECK(three[0] + three[1] + three[2] == 7);
  c.workers = 2;
  c.auto_balance = "time";
  const auto by_time = choose_balance(c, model, images);
  REQUIRE(by_time.size() == 2);
  CHECK(by_time[0] + by_time[1] == 7);
  CHECK(by_time[0] >= 1);
  CHECK(by_time[1] >= 1);
  // Profiling leaves the weights as they were.
  CHECK(pipewright::ops::allclose(model.parameters().front(), before, 0.0, 0.0));

  std::ostringstream log;
  c.auto_balance = "speed";
  CHECK_THROWS_WITH(train(c, log), Catch::Contains("--balance auto-speed"));
  c.auto_balance = "size";
  c.balance = {1, 6};
  CHECK_THROWS_WITH(train(c, log), Catch::Contains("cannot be combined"));
}

TEST_CASE("the V-shaped, interleaved and looped schedules train the main job") {
  const std::string schedule =
      GENERATE(as<std::string>{}, "zb-v", "dualpipev", "interleaved-zb", "looped-bfs");
  CAPTURE(schedule);
  TrainConfig c = small_config();
  c.epochs = 1;
  c.schedule = schedule;
  // Given or not: without --virtual-stages a schedule gets the least its registry row takes
  // (2 for each of these).
  if (schedule == "interleaved-zb") c.virtual_stages = 2;
  std::ostringstream log;
  auto result = train(c, log);
  INFO(log.str());
  // 2 stage workers x 2 virtual stages: the model's 5 layers in 4 partitions.
  const bool v_shape = schedule == "zb-v" || schedule == "dualpipev";
  CHECK(log.str().find(std::string("2 workers on cpu:0, cpu:1 | 2 virtual stages each (") +
                       (v_shape ? "V" : "round robin") + ") = 4 stages") != std::string::npos);
  CHECK(result.epochs[0].train_loss < 2.3026);
  CHECK(result.epochs[0].test_accuracy > 0.5);
  CHECK(result.epochs[0].peak_bytes.size() == 2);
  c.virtual_stages = -1;
  CHECK_THROWS_WITH(train(c, log), Catch::Contains("virtual-stages"));
}

namespace {

/// The config the flags `args` give, parsed by TrainFlags as the examples parse them.
TrainConfig parse_flags(std::vector<std::string> args) {
  TrainConfig config;
  CLI::App app{"test"};
  pipewright::examples::TrainFlags flags(app, config);
  args.insert(args.begin(), "fashion_mnist");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  flags.apply();
  return config;
}

/// What `f` writes to stderr (file descriptor 2) while it runs; stderr is restored when `f`
/// throws too.
template <class F>
std::string stderr_of(F f) {
  struct Redirect {
    std::FILE* file = std::tmpfile();
    int saved = -1;
    Redirect() {
      REQUIRE(file != nullptr);
      std::fflush(stderr);
      saved = ::dup(2);
      ::dup2(::fileno(file), 2);
    }
    ~Redirect() {
      std::fflush(stderr);
      ::dup2(saved, 2);
      ::close(saved);
      std::fclose(file);
    }
  } redirect;
  f();
  std::fflush(stderr);
  std::rewind(redirect.file);
  std::string text;
  for (int ch; (ch = std::fgetc(redirect.file)) != EOF;) text += static_cast<char>(ch);
  return text;
}

}  // namespace

TEST_CASE("a list flag with a wrong entry says which entry and why") {
  CHECK(parse_flags({"--balance", "1,2,6"}).balance == std::vector<int>{1, 2, 6});
  CHECK_THROWS_WITH(parse_flags({"--balance", "1,2,x"}),
                    Catch::StartsWith("--balance 1,2,x: entry 3 ('x') is not a layer count"));
  CHECK_THROWS_WITH(parse_flags({"--balance", "2x,7"}),
                    Catch::StartsWith("--balance 2x,7: entry 1 ('2x') is not a layer count"));
  CHECK(parse_flags({"--devices", "cpu:0,cpu:3"}).devices ==
        std::vector<pipewright::Device>{pipewright::Device::cpu(0), pipewright::Device::cpu(3)});
  CHECK_THROWS_WITH(parse_flags({"--devices", "cpu:0,gpu:1"}),
                    Catch::StartsWith("--devices cpu:0,gpu:1: entry 2 ('gpu:1') ") &&
                        Catch::Contains("unknown device"));
}

TEST_CASE("--workers sets the pipeline's workers; the retired --stages is refused, naming it") {
  int workers = 0;
  CHECK(stderr_of([&] { workers = parse_flags({"--workers", "3"}).workers; }).empty());
  CHECK(workers == 3);
  CHECK_THROWS_WITH(parse_flags({"--stages", "4"}),
                    Catch::Contains("--stages: retired: it is --workers now (the same number)"));
}

TEST_CASE("--float32-matmul-precision takes torch's names; the run sets it for the process") {
  CHECK(parse_flags({}).float32_matmul_precision == pipewright::Float32MatmulPrecision::kHighest);
  CHECK(parse_flags({"--float32-matmul-precision", "high"}).float32_matmul_precision ==
        pipewright::Float32MatmulPrecision::kHigh);
  CHECK_THROWS_WITH(parse_flags({"--float32-matmul-precision", "medium"}),
                    Catch::Contains("--float32-matmul-precision") && Catch::Contains("medium"));
  TrainConfig config = parse_flags({"--float32-matmul-precision", "high"});
  int argc = 1;
  char name[] = "fashion_mnist";
  char* args[] = {name, nullptr};
  char** argv = args;
  pipewright::Float32MatmulPrecision during = pipewright::Float32MatmulPrecision::kHighest;
  CHECK(pipewright::examples::run_example(&argc, &argv, config, [&] {
          during = pipewright::float32_matmul_precision();
        }) == 0);
  pipewright::set_float32_matmul_precision(pipewright::Float32MatmulPrecision::kHighest);
  CHECK(during == pipewright::Float32MatmulPrecision::kHigh);
}

TEST_CASE("--optimizer sgd takes --momentum") {
  CHECK(parse_flags({}).momentum == 0.9);
  CHECK(parse_flags({"--optimizer", "sgd", "--momentum", "0.5"}).momentum == 0.5);
}

TEST_CASE("SGD on a three-stage cut that is not even: the loss falls to near its known value") {
  // SGD (momentum 0.9) shows a wrong gradient scale that Adam would normalise away. The
  // model's 9 layers are cut unevenly, as a cut by parameter count may (the first Linear holds
  // 100,480 of 104,906 parameters): 1, 4 and 4 layers, not 3, 3, 3.
  TrainConfig c = small_config();
  c.optimizer = "sgd";
  c.lr = 0.05;
  c.hidden = {128, 32};
  c.workers = 3;
  c.chunks = 5;
  c.lr_schedule = "constant";
  c.balance = {1, 4, 4};
  std::ostringstream log;
  auto result = train(c, log);
  INFO(log.str());
  REQUIRE(result.epochs.size() == 2);
  // Observed (default config, 2026-11-24): train loss 1.809 then 1.184, test accuracy 0.74.
  // Bands, not one-sided bounds: a gradient off by a constant factor changes SGD's effective
  // step and with it the curve; Adam's normalised step would not see such a factor.
  CHECK(std::abs(result.epochs[0].train_loss - 1.809) < 0.05);
  CHECK(std::abs(result.epochs[1].train_loss - 1.184) < 0.05);
  CHECK(result.epochs[1].test_accuracy > 0.70);
  CHECK(result.epochs[1].test_accuracy < 0.78);
}

TEST_CASE("the cosine learning rate, as set at each step, is in the checkpoint: closed form") {
  // 200 images in batches of 50: 4 steps per epoch, 12 in 3 epochs. Stopping after epoch 2
  // saves the optimizer as the last step (global step 7) left it: lr·(1 + cos(7π/12))/2 on
  // the cosine schedule, lr itself on the constant one.
  const std::string schedule = GENERATE(as<std::string>{}, "cosine", "constant");
  CAPTURE(schedule);
  TrainConfig c = small_config();
  c.epochs = 3;
  c.stop_after = 2;
  c.train_limit = 200;
  c.test_limit = 50;
  c.lr = 0.004;
  c.lr_schedule = schedule;
  c.save = temp_path("fashion_mnist_lr_" + schedule + ".safetensors");
  std::ostringstream log;
  train(c, log);
  const auto file = pipewright::nn::load_safetensors(c.save);
  double lr = -1;
  for (const auto& [name, t] : file.tensors) {
    if (name == "optimizer.param_groups.0.lr") lr = t.item();
  }
  const double expected =
      schedule == "cosine" ? 0.004 * 0.5 * (1.0 + std::cos(M_PI * 7.0 / 12.0)) : 0.004;
  REQUIRE(std::abs(lr - expected) <= 1e-15);
}

TEST_CASE("--resume refuses a checkpoint saved with other settings, and a file that is none") {
  TrainConfig c = small_config();
  c.epochs = 2;
  c.stop_after = 1;
  c.train_limit = 100;
  c.test_limit = 50;
  c.save = temp_path("fashion_mnist_settings.safetensors");
  std::ostringstream log;
  train(c, log);

  TrainConfig other = c;
  other.save.clear();
  other.stop_after = 0;
  other.resume = c.save;
  other.lr_schedule = "constant";
  CHECK_THROWS_WITH(train(other, log),
                    Catch::StartsWith(c.save + ": saved with different settings (") &&
                        Catch::Contains("lr_schedule=cosine") &&
                        Catch::Contains(") than now (") &&
                        Catch::Contains("lr_schedule=constant"));

  const std::string junk = temp_path("fashion_mnist_not_a_checkpoint.safetensors");
  {
    std::ofstream out(junk);
    out << "epoch 1, loss 0.5\n";
  }
  other = c;
  other.save.clear();
  other.stop_after = 0;
  other.resume = junk;
  // Its first 8 bytes read as a header length: "<path>: header size 3184362044244586597
  // exceeds the limit of 100 MB".
  CHECK_THROWS_WITH(train(other, log), Catch::StartsWith(junk + ": header size ") &&
                                           Catch::Contains("exceeds the limit"));
}
