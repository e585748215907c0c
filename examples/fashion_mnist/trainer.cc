#include "examples/fashion_mnist/trainer.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "autograd/grad_mode.h"
#include "data/dataloader.h"
#include "data/fashion_mnist.h"
#include "distributed/mpi_processes.h"
#include "examples/common/pipeline_stats.h"
#include "examples/common/plan_vs_run.h"
#include "examples/common/run_checkpoint.h"
#include "examples/common/run_setup.h"
#include "examples/fashion_mnist/auto_plan.h"
#include "examples/common/progress.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/lr_scheduler.h"
#include "nn/optim.h"
#include "nn/serialize.h"
#include "pipeline/balance.h"
#include "pipeline/pipe.h"
#include "pipeline/schedule/registry.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

namespace pipewright::examples {
namespace {

constexpr int64_t kImagePixels = 28 * 28;
constexpr int64_t kNumClasses = 10;
constexpr int64_t kEvalBatch = 1000;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<nn::Optimizer> make_optimizer(const TrainConfig& config, const nn::Tensors& params) {
  if (config.optimizer == "sgd") {
    return std::make_unique<nn::SGD>(
        params, nn::SGDOptions{.lr = config.lr,
                               .momentum = config.momentum,
                               .weight_decay = config.weight_decay});
  }
  return std::make_unique<nn::Adam>(
      params, nn::AdamOptions{.lr = config.lr, .weight_decay = config.weight_decay});
}

// The learning-rate schedule over the run's `total` steps (nn/lr_scheduler.h): cosine
// annealing from config.lr to 0, or constant. A function of the global step alone, so a
// resumed run continues the same curve. Made before a resume restores the optimizer's lr, so
// its base is config.lr.
std::unique_ptr<nn::LRScheduler> make_schedule(const TrainConfig& config, nn::Optimizer& optimizer,
                                               int64_t total) {
  if (config.lr_schedule == "constant") return std::make_unique<nn::ConstantLR>(optimizer, 1.0, 0);
  return std::make_unique<nn::WarmupCosineLR>(optimizer, /*warmup_steps=*/0, total);
}

// ---- checkpoint metadata: everything besides tensors that a resume needs ----

// The flags that define the model and its training; resuming with others is refused. The cut
// (workers, balance, schedule, chunks, data-parallel degree) is not among them: a checkpoint
// holds everything by name (examples/common/run_checkpoint.h), and random layers key their
// draws by sample, not by worker, so another cut continues the same run.
std::string fingerprint(const TrainConfig& c) {
  std::string hidden;
  for (int64_t h : c.hidden) hidden += std::to_string(h) + ",";
  return "hidden=" + hidden + " dropout=" + std::to_string(c.dropout) + " optimizer=" +
         c.optimizer + " lr_schedule=" + c.lr_schedule + " epochs=" + std::to_string(c.epochs) +
         " batch_size=" + std::to_string(c.batch_size);
}

std::map<std::string, std::string> checkpoint_metadata(const TrainConfig& config, int epoch,
                                                       const data::DataLoader& loader,
                                                       const pipeline::Pipe& pipe) {
  return {
      {"epoch", std::to_string(epoch)},
      {"config", fingerprint(config)},
      {"loader.seed", std::to_string(loader.generator().seed())},
      {"loader.offset", std::to_string(loader.generator().offset())},
      {"random.step", std::to_string(pipe.random_key().step)},
  };
}

uint64_t meta_u64(const std::map<std::string, std::string>& meta, const std::string& key,
                  const std::string& path) {
  auto it = meta.find(key);
  if (it == meta.end()) {
    throw std::runtime_error(path + ": not a fashion_mnist checkpoint (no \"" + key + "\" entry)");
  }
  uint64_t value = 0;
  const std::string& text = it->second;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw std::runtime_error(path + ": entry \"" + key + "\" is \"" + text +
                             "\", not a whole number");
  }
  return value;
}

// Restores a checkpoint, written under any cut; returns the number of epochs it had completed
// and sets `ignored` to what load_run_checkpoint left alone.
int resume(const TrainConfig& config, pipeline::Pipe& pipe, nn::Optimizer& optimizer,
           data::DataLoader& loader, const distributed::MpiProcesses* processes,
           std::string& ignored) {
  LoadedRunCheckpoint loaded = load_run_checkpoint(config.resume, pipe, optimizer, processes);
  ignored = loaded.ignored;
  remove_stale_shards(config.resume, config.save, loaded.generation, processes);
  std::map<std::string, std::string>& meta = loaded.metadata;
  if (meta["config"] != fingerprint(config)) {
    throw std::runtime_error(config.resume + ": saved with different settings (" +
                             meta["config"] + ") than now (" + fingerprint(config) + ")");
  }
  loader.set_generator_state(meta_u64(meta, "loader.seed", config.resume),
                             meta_u64(meta, "loader.offset", config.resume));
  pipe.set_random_step(meta_u64(meta, "random.step", config.resume));
  return static_cast<int>(meta_u64(meta, "epoch", config.resume));
}

// Across processes (`processes` set), every rank first receives the stages it does not train
// (share_stage_state), then the caller's rank runs the whole model, stage by stage on each
// stage's device: the same computation as Pipe::forward in eval mode.
double test_accuracy(pipeline::Pipe& pipe, const data::Dataset& test,
                     distributed::MpiProcesses* processes) {
  autograd::NoGradGuard no_grad;
  if (processes != nullptr) {
    processes->share_stage_state(pipe);
    if (processes->rank() != 0) return 0;  // rank 0 evaluates, the others go on
  }
  pipe.eval();
  auto forward = [&](const Tensor& x) { return whole_model_forward(pipe, x, processes); };
  int64_t correct = 0;
  for (int64_t start = 0; start < test.size(); start += kEvalBatch) {
    data::Batch batch = test.slice(start, std::min(test.size(), start + kEvalBatch));
    Tensor predicted = ops::argmax(forward(batch.inputs), 1);
    std::vector<int64_t> p = predicted.to_vector<int64_t>();
    std::vector<int64_t> y = batch.targets.to_vector<int64_t>();
    for (size_t i = 0; i < p.size(); ++i) correct += p[i] == y[i];
  }
  pipe.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

void print_epoch(std::ostream& out, const TrainConfig& config, const Task& task, const EpochStats& e,
                 const std::string& score, const std::vector<Device>& devices) {
  out << "epoch " << e.epoch << "/" << config.epochs << ": train " << task.loss_name << " "
      << format_fixed(e.train_loss, 4) << " | " << score << " | " << format_fixed(e.seconds, 1)
      << " s | " << format_count(e.samples_per_second) << " samples/s"
      << bubble_and_memory(e, devices) << "\n" << std::flush;
}

}  // namespace

nn::Sequential build_model(const std::vector<int64_t>& hidden, double dropout, uint64_t seed) {
  Generator init(seed);
  GeneratorGuard guard(init);
  nn::Sequential model;
  int64_t width = kImagePixels;
  for (int64_t h : hidden) {
    model.push_back(nn::Linear(width, h));
    model.push_back(nn::BatchNorm1d(h));
    model.push_back(nn::ReLU());
    if (dropout > 0) model.push_back(nn::Dropout(dropout));
    width = h;
  }
  model.push_back(nn::Linear(width, kNumClasses));
  return model;
}

std::vector<int> choose_balance(const TrainConfig& config, nn::Sequential& model,
                                const data::Dataset& train_set) {
  if (!config.balance.empty()) return config.balance;
  if (config.auto_balance.empty()) {
    return pipeline::balance_by_parameters(num_partitions(config), model);
  }
  // Profile on the device the model was built on, with the first mini-batch's images.
  const Device device = model.parameters().front().device();
  const int64_t rows = std::min<int64_t>(config.batch_size, train_set.size());
  const Tensor batch = train_set.inputs().slice(0, rows).to(device);
  if (config.auto_balance == "time") {
    return pipeline::balance_by_time(num_partitions(config), model, batch.chunk(config.chunks)[0],
                                     {.device = device});
  }
  return pipeline::balance_by_size(
      num_partitions(config), model, batch,
      {.device = device, .chunks = config.chunks, .param_scale = config.optimizer == "adam" ? 5.0 : 3.0});
}

Task classifier_task() {
  Task task;
  task.build_model = [](const TrainConfig& c) { return build_model(c.hidden, c.dropout, c.seed); };
  task.loss = [](const Tensor& logits, const Tensor& target) {
    return nn::cross_entropy(logits, target);
  };
  task.evaluate = [](pipeline::Pipe& pipe, const data::Dataset& test, EpochStats& stats) {
    stats.test_accuracy = test_accuracy(pipe, test, nullptr);
    return "test acc " + format_fixed(stats.test_accuracy, 4);
  };
  return task;
}

TrainResult train(const TrainConfig& config, std::ostream& out) {
  return train(config, out, classifier_task());
}

TrainResult train(const TrainConfig& config, std::ostream& out, const Task& task) {
  // The pipeline's workers own the cores while a step runs. The calling thread only does
  // light work between steps (shuffled batches, the optimizer, accuracy), so it keeps to one
  // thread: an OpenMP team of its own would spin-wait on the cores the workers need.
  ThreadBudgetGuard caller_threads(1);
  nn::Sequential model = task.build_model(config);
  validate(config, model.size());
  const std::vector<Device> devices = worker_devices(config);

  const std::string dir = config.data_dir.empty() ? data::kDefaultFashionMnistDir : config.data_dir;
  data::FashionMnistOptions train_opts = task.images, test_opts = task.images;
  if (config.train_limit > 0) train_opts.limit = config.train_limit;
  if (config.test_limit > 0) test_opts.limit = config.test_limit;
  const Device host = data_device(devices);
  auto load = [&](data::Split split, const data::FashionMnistOptions& options) {
    data::Dataset set = data::load_fashion_mnist(dir, split, options);
    return data::Dataset(set.inputs().to(host), set.targets().to(host));
  };
  data::Dataset train_set = load(data::Split::kTrain, train_opts);
  data::Dataset test_set = load(data::Split::kTest, test_opts);
  const std::vector<Device> workers(devices.begin(), devices.begin() + config.workers);
  std::optional<pipeline::Plan> plan;
  if (config.plan == "auto") {
    model.to(workers.front());  // profiled where it will run (pipeline::plan)
    plan = plan_training(config, model, train_set, task.loss, workers);
  }
  const std::vector<int> balance = plan ? plan->balance : choose_balance(config, model, train_set);
  data::DataLoader loader(train_set, {.batch_size = config.batch_size, .shuffle = true,
                                      .seed = config.seed});

  int64_t num_params = 0;
  for (const Tensor& p : model.parameters()) num_params += p.numel();
  // Across processes: this rank's MpiProcesses; rank 0 alone prints (and evaluates).
  const std::shared_ptr<distributed::MpiProcesses> processes = make_processes(config);
  const bool leader = processes == nullptr || processes->rank() == 0;
  std::ostream silent(nullptr);
  std::ostream& log = leader ? out : silent;
  pipeline::PipeOptions options =
      pipe_options(config, balance, devices, processes, plan ? &*plan : nullptr);
  options.deferred_batch_norm = true;
  pipeline::Pipe pipe(std::move(model), std::move(options));
  std::unique_ptr<nn::Optimizer> optimizer = make_optimizer(config, pipe.parameters());
  const std::unique_ptr<nn::LRScheduler> schedule =
      make_schedule(config, *optimizer, int64_t{config.epochs} * loader.num_batches());

  int first_epoch = 0;
  std::string ignored;  // uncommitted checkpoints the resume left alone
  if (!config.resume.empty()) {
    first_epoch = resume(config, pipe, *optimizer, loader, processes.get(), ignored);
  }

  print_pipeline_header(log, config, pipe, balance, devices, num_params,
                        plan ? plan->str() : std::string());
  if (plan && config.explain) log << plan->explain();
  log << "data: " << train_set.size() << " train / " << test_set.size() << " test images from "
      << dir << "\n";
  if (task.describe) task.describe(pipe, log);
  log << ignored;
  if (first_epoch > 0)
    log << "resumed from " << config.resume << " after epoch " << first_epoch << "\n";
  log << std::flush;

  const pipeline::LossFn& loss_fn = task.loss;
  TrainResult result;
  std::vector<PipelineStats> stretches;
  std::vector<int64_t> epoch_numbers;
  StepTracer tracer(config, processes.get());
  double planned_step_seconds = 0;  // --plan auto: train_step's wall time, and how many steps
  int64_t planned_steps = 0;
  StepPeaks step_peaks({devices.begin(), devices.begin() + config.workers});  // and its peaks
  const int last_epoch = config.stop_after > 0 ? std::min(config.stop_after, config.epochs) : config.epochs;
  nn::GradScaler scaler = grad_scaler_for(config);  // --precision fp16
  const bool graphed = graphed_steps(config, processes.get(), log);  // --cuda-graphs
  for (int epoch = first_epoch; epoch < last_epoch; ++epoch) {
    EpochStats stats;
    PipelineMeter meter({devices.begin(), devices.begin() + config.workers}, processes.get());
    Progress progress(log, epoch + 1, config.epochs, loader.num_batches(),
                      config.progress && leader);
    double loss_sum = 0;
    int64_t samples = 0, steps = 0;
    const auto start = Clock::now();
    for (const data::Batch& batch : loader) {
      schedule->set_last_step(epoch * loader.num_batches() + steps);
      if (!graphed) optimizer->zero_grad();
      const auto [input, target] =
          task.make_step ? task.make_step(config, batch, epoch * loader.num_batches() + steps)
                         : std::pair(batch.inputs, batch.targets);
      const bool trace_now =
          tracer.before((epoch - first_epoch) * loader.num_batches() + steps + 1);
      // --plan auto: the peaks of train_step alone, apart from the optimizer's step (the
      // plan predicts the former).
      if (plan) step_peaks.before_step();
      const auto step_start = Clock::now();
      const pipeline::StepResult step =
          graphed ? graphed_step(pipe, *optimizer, scaler, input, target, loss_fn, log)
                  : train_one_step(pipe, processes.get(), input, target, loss_fn, log,
                                   {.loss_scale = scaler.scale(), .device_timeline = trace_now});
      // The steady state's full mini-batches (not the run's first step) time the plan.
      if (plan && (epoch > first_epoch || steps > 0) && input.size(0) == config.batch_size) {
        planned_step_seconds += seconds_since(step_start);
        ++planned_steps;
        step_peaks.after_step();
      }
      if (!graphed) optimizer_step(pipe, *optimizer, scaler);
      if (trace_now) tracer.after(step);
      stats.step_losses.push_back(step.loss);
      loss_sum += step.loss * static_cast<double>(batch.size());
      meter.add(step);
      samples += batch.size();
      ++steps;
      progress.update(steps, samples, seconds_since(start), loss_sum / static_cast<double>(samples));
    }
    stats.epoch = epoch + 1;
    stats.seconds = seconds_since(start);
    progress.finish();
    stats.train_loss = loss_sum / static_cast<double>(samples);
    stats.samples_per_second = static_cast<double>(samples) / stats.seconds;
    static_cast<PipelineStats&>(stats) = meter.finish();
    stats.graph_pool_bytes = pipe.graph_pool_bytes();
    if (plan) step_peaks.fold_stretch(stats.peak_bytes);
    stretches.push_back(stats);
    epoch_numbers.push_back(stats.epoch);
    std::string score;
    if (processes != nullptr) {
      // Rank 0 scores the classifier on the stages' shared state (only the main job, the
      // classifier, runs across processes).
      stats.test_accuracy = test_accuracy(pipe, test_set, processes.get());
      score = "test acc " + format_fixed(stats.test_accuracy, 4);
    } else {
      autograd::NoGradGuard no_grad;
      pipe.eval();
      score = task.evaluate(pipe, test_set, stats);
      pipe.train();
    }
    print_epoch(log, config, task, stats, score, devices);
    result.epochs.push_back(stats);
    if (!config.save.empty()) {
      save_run_checkpoint(config.save, pipe, *optimizer,
                          checkpoint_metadata(config, epoch + 1, loader, pipe), epoch + 1,
                          processes.get());
    }
  }
  for (auto& [name, tensor] : pipe.module().state_dict()) {
    result.final_state.emplace_back(name, tensor.to(Device::cpu(0)).clone());
  }
  print_steady_state(log, stretches, "epoch", epoch_numbers, devices);
  if (plan && !result.epochs.empty()) {
    const double step_ms =
        planned_steps > 0 ? 1000.0 * planned_step_seconds / planned_steps : 0.0;
    print_plan_against_run(log, *plan, measured_run(step_ms, stretches, step_peaks), devices);
    result.planned_peaks = plan->peaks;
    result.step_peak_bytes = step_peaks.in_step();
  }
  tracer.report(log, int64_t{last_epoch - first_epoch} * loader.num_batches());
  return result;
}

}  // namespace pipewright::examples
