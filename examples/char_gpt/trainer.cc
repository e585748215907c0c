#include "examples/char_gpt/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "autograd/grad_mode.h"
#include "autograd/shape_ops.h"
#include "data/char_corpus.h"
#include "distributed/mpi_processes.h"
#include "examples/char_gpt/model.h"
#include "examples/common/pipeline_stats.h"
#include "examples/common/plan_vs_run.h"
#include "examples/common/run_checkpoint.h"
#include "examples/common/run_setup.h"
#include "examples/common/progress.h"
#include "nn/loss.h"
#include "nn/lr_scheduler.h"
#include "nn/optim.h"
#include "pipeline/balance.h"
#include "pipeline/pipe.h"
#include "pipeline/planner/planner.h"
#include "tensor/generator.h"
#include "tensor/threads.h"

namespace pipewright::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void bad(const std::string& flag, const std::string& value, const std::string& why) {
  throw std::invalid_argument("--" + flag + " " + value + ": " + why);
}

/// "2.4567 (3.544 bits/char)".
std::string nats_and_bits(double nats) {
  return format_fixed(nats, 4) + " (" + format_fixed(nats / std::log(2.0), 3) + " bits/char)";
}

/// The flags that define the model and its training; resuming with others is refused (the
/// cut is not among them: examples/common/run_checkpoint.h).
std::string fingerprint(const GptConfig& c) {
  return "layers=" + std::to_string(c.layers) + " dim=" + std::to_string(c.dim) +
         " heads=" + std::to_string(c.heads) + " context=" + std::to_string(c.context) +
         " dropout=" + std::to_string(c.dropout) + " batch_size=" +
         std::to_string(c.run.batch_size) + " steps=" + std::to_string(c.steps) +
         " warmup=" + std::to_string(c.warmup) + " seed=" + std::to_string(c.run.seed);
}

/// Cross-entropy of logits [b, T, V] against the next characters [b, T], per character.
pipeline::LossFn lm_loss(int64_t vocab) {
  return [vocab](const Tensor& logits, const Tensor& target) {
    return nn::cross_entropy(autograd::reshape(logits, {target.numel(), vocab}),
                             autograd::reshape(target, {target.numel()}));
  };
}

// The seed of the validation windows: the same windows at every report (and in the peer).
constexpr uint64_t kValidationSeed = 1;

/// Mean loss per character over `windows` fixed validation windows, in eval mode (no
/// dropout), batch_size windows per pipeline step (every rank runs it across processes).
double validation_loss(pipeline::Pipe& pipe, const data::CharCorpus& corpus,
                       const GptConfig& config, int64_t windows, Device host) {
  autograd::NoGradGuard no_grad;
  pipe.eval();
  const pipeline::LossFn loss = lm_loss(corpus.vocab_size());
  double sum = 0;
  int64_t count = 0;
  for (int64_t k = 0; count < windows; ++k) {
    const int64_t n = std::min(config.run.batch_size, windows - count);
    auto [x, y] = corpus.window_batch(data::TextSplit::kValidation, k, n, config.context,
                                      kValidationSeed, host);
    sum += pipe.eval_step(x, y, loss).loss * static_cast<double>(n);
    count += n;
  }
  pipe.train();
  return sum / static_cast<double>(count);
}

/// `count` characters after `prompt`, each drawn from softmax(logits / temperature) over the
/// top_k likeliest (all with 0), by a Generator seeded from the run's seed. Across processes
/// rank 0 draws them (after every rank shared its stages); the others return "".
std::string sample(pipeline::Pipe& pipe, const data::CharCorpus& corpus, const GptConfig& config,
                   distributed::MpiProcesses* processes) {
  if (processes != nullptr) {
    processes->share_stage_state(pipe);
    if (processes->rank() != 0) return "";
  }
  autograd::NoGradGuard no_grad;
  pipe.eval();
  std::vector<int64_t> tokens = corpus.encode(config.prompt);
  const size_t prompt_size = tokens.size();
  Generator rng(config.run.seed + 2);
  const int64_t vocab = corpus.vocab_size();
  for (int64_t n = 0; n < config.sample_chars; ++n) {
    const auto t = static_cast<int64_t>(std::min<size_t>(tokens.size(), config.context));
    Tensor x = Tensor::empty({1, t}, {.dtype = DType::kInt64});
    std::copy(tokens.end() - t, tokens.end(), x.data<int64_t>());
    const Tensor logits = whole_model_forward(pipe, x, processes).to(Device::cpu(0)).contiguous();
    const float* last = logits.data<float>() + (t - 1) * vocab;
    std::vector<double> p(last, last + vocab);
    std::vector<double> sorted = p;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double floor = config.top_k > 0 && config.top_k < vocab
                             ? sorted[static_cast<size_t>(config.top_k - 1)]
                             : -INFINITY;
    double total = 0;
    for (double& v : p) {
      v = v < floor ? 0.0 : std::exp((v - sorted[0]) / config.temperature);
      total += v;
    }
    Tensor u = Tensor::empty({1}, {.dtype = DType::kFloat64});
    rng.uniform_(u);
    double r = u.item() * total;
    int64_t chosen = vocab - 1;
    for (int64_t c = 0; c < vocab; ++c) {
      r -= p[static_cast<size_t>(c)];
      if (r < 0 && p[static_cast<size_t>(c)] > 0) {
        chosen = c;
        break;
      }
    }
    tokens.push_back(chosen);
  }
  pipe.train();
  return corpus.decode(std::vector<int64_t>(tokens.begin() + prompt_size, tokens.end()));
}

int64_t meta_step(const std::map<std::string, std::string>& meta, const std::string& path) {
  auto it = meta.find("step");
  if (it == meta.end()) throw std::runtime_error(path + ": not a char_gpt checkpoint (no step)");
  return std::stoll(it->second);
}

}  // namespace

GptConfig char_gpt_defaults() {
  GptConfig c;
  c.run.workers = 4;
  c.run.chunks = 8;
  c.run.schedule = "1f1b";
  c.run.checkpoint = pipeline::Checkpoint::kNever;
  c.run.batch_size = 32;
  c.run.lr = 2e-3;
  c.run.weight_decay = 0.1;
  return c;
}

void validate(const GptConfig& c) {
  if (c.layers < 1) bad("layers", std::to_string(c.layers), "must be at least 1");
  if (c.dim < 1) bad("dim", std::to_string(c.dim), "must be at least 1");
  if (c.heads < 1 || c.dim % c.heads != 0) {
    bad("heads", std::to_string(c.heads), "must divide --dim " + std::to_string(c.dim));
  }
  if (c.context < 2) bad("context", std::to_string(c.context), "must be at least 2");
  if (c.dropout < 0 || c.dropout >= 1) bad("dropout", std::to_string(c.dropout), "must be in [0, 1)");
  try {
    (void)nn::attention_kernel_from_name(c.attention);
  } catch (const std::invalid_argument&) {
    bad("attention", c.attention, "must be flash, fused or reference");
  }
  if (c.steps < 1) bad("steps", std::to_string(c.steps), "must be at least 1");
  if (c.stop_after < 0) bad("stop-after", std::to_string(c.stop_after), "must be >= 0");
  if (c.warmup < 0 || c.warmup > c.steps) {
    bad("warmup", std::to_string(c.warmup), "must be in [0, --steps]");
  }
  if (c.grad_clip < 0) bad("grad-clip", std::to_string(c.grad_clip), "must be >= 0 (0: off)");
  if (c.eval_every < 1) bad("eval-every", std::to_string(c.eval_every), "must be at least 1");
  if (c.eval_windows < 1) bad("eval-windows", std::to_string(c.eval_windows), "must be >= 1");
  if (c.temperature <= 0) bad("temperature", std::to_string(c.temperature), "must be positive");
  if (c.top_k < 0) bad("top-k", std::to_string(c.top_k), "must be >= 0 (0: all)");
  if (c.sample_chars < 0) bad("sample-chars", std::to_string(c.sample_chars), "must be >= 0");
  if (!c.run.auto_balance.empty()) {
    bad("balance", "auto-" + c.run.auto_balance, "give layer counts (or none: by parameters)");
  }
  validate(c.run, static_cast<size_t>(c.layers) + 3);
}

GptResult train_char_gpt(const GptConfig& config, std::ostream& out) {
  // The workers own the cores while a step runs; the caller's work between steps is light.
  ThreadBudgetGuard caller_threads(1);
  validate(config);
  const TrainConfig& run = config.run;
  const std::string dir = run.data_dir.empty() ? data::kDefaultFortunesDir : run.data_dir;
  const std::vector<Device> devices = worker_devices(run);
  const Device host = data_device(devices);
  // The tokens on a device no stage uses: the stages' memory counts are the pipeline's own.
  const data::CharCorpus corpus = data::load_char_corpus(dir, host);
  const GptShape shape{.vocab = corpus.vocab_size(), .context = config.context, .dim = config.dim,
                       .heads = config.heads, .layers = config.layers, .dropout = config.dropout,
                       .attention = nn::attention_kernel_from_name(config.attention)};
  nn::Sequential model = build_char_gpt(shape, run.seed);
  const int64_t num_params = count_parameters(model, config.layers);
  const pipeline::LossFn loss_fn = lm_loss(corpus.vocab_size());
  const std::vector<Device> workers(devices.begin(), devices.begin() + run.workers);
  // --plan auto: the cut, schedule, chunks and recomputes from pipeline::plan, for the first
  // training batch's shape (every batch has it).
  std::optional<pipeline::Plan> plan;
  if (run.plan == "auto") {
    auto [x, y] = corpus.window_batch(data::TextSplit::kTrain, 0, run.batch_size, config.context,
                                      run.seed, host);
    model.to(workers.front());  // profiled where it will run
    pipeline::PlanOptions plan_opts = plan_options(run);
    plan_opts.tied_parameters = tied_parameters(config.layers);
    plan = pipeline::plan(model, {x, y, loss_fn}, workers, plan_opts);
  }
  const std::vector<int> balance =
      plan ? plan->balance
           : run.balance.empty() ? pipeline::balance_by_parameters(num_partitions(run), model)
                                 : run.balance;

  const std::shared_ptr<distributed::MpiProcesses> processes = make_processes(run);
  const bool leader = processes == nullptr || processes->rank() == 0;
  std::ostream silent(nullptr);
  std::ostream& log = leader ? out : silent;
  pipeline::PipeOptions options =
      pipe_options(run, balance, devices, processes, plan ? &*plan : nullptr);
  options.tied_parameters = tied_parameters(config.layers);
  pipeline::Pipe pipe(std::move(model), std::move(options));
  nn::AdamW optimizer(nn::weight_decay_groups(pipe.parameters(), run.weight_decay),
                      {.lr = run.lr,
                       .betas = {config.beta1, config.beta2},
                       .eps = config.eps,
                       .weight_decay = run.weight_decay});
  nn::WarmupCosineLR schedule(optimizer, config.warmup, config.steps,
                              config.min_lr_ratio * run.lr);

  int64_t first_step = 0;
  std::string ignored;  // uncommitted checkpoints the resume left alone
  if (!run.resume.empty()) {
    LoadedRunCheckpoint loaded = load_run_checkpoint(run.resume, pipe, optimizer, processes.get());
    ignored = loaded.ignored;
    remove_stale_shards(run.resume, run.save, loaded.generation, processes.get());
    std::map<std::string, std::string>& meta = loaded.metadata;
    if (meta["config"] != fingerprint(config)) {
      throw std::runtime_error(run.resume + ": saved with different settings (" + meta["config"] +
                               ") than now (" + fingerprint(config) + ")");
    }
    first_step = meta_step(meta, run.resume);
    pipe.set_random_step(static_cast<uint64_t>(first_step));  // Note [Keyed randomness]
  }

  print_pipeline_header(log, run, pipe, balance, devices, num_params,
                        plan ? plan->str() : std::string());
  if (plan && run.explain) log << plan->explain();
  log << "tied: " << pipe.options().tied_parameters[0][0] << " = "
      << pipe.options().tied_parameters[0][1] << " (the LM head is the token embedding)\n"
      << "data: " << format_count(static_cast<double>(corpus.size(data::TextSplit::kTrain)))
      << " train / " << format_count(static_cast<double>(corpus.size(data::TextSplit::kValidation)))
      << " validation characters from " << dir << " (vocabulary " << corpus.vocab_size()
      << ") | batch " << run.batch_size << " x " << config.context << " characters\n";
  log << ignored;
  if (first_step > 0) log << "resumed from " << run.resume << " after step " << first_step << "\n";
  log << std::flush;

  const int64_t last_step = config.stop_after > 0 ? std::min(config.stop_after, config.steps)
                                                  : config.steps;
  double planned_step_seconds = 0;  // --plan auto: train_step's wall time after the first step
  int64_t planned_steps = 0;
  StepPeaks step_peaks(workers);  // and its peaks
  GptResult result;
  std::vector<PipelineStats> stretches;
  std::vector<int64_t> report_numbers;
  StepTracer tracer(run, processes.get());
  auto meter = std::make_unique<PipelineMeter>(workers, processes.get());
  double loss_sum = 0, train_seconds = 0;
  int64_t steps_since = 0;
  nn::GradScaler scaler = grad_scaler_for(run);  // --precision fp16
  const bool graphed = graphed_steps(run, processes.get(), log);  // --cuda-graphs
  for (int64_t step = first_step; step < last_step; ++step) {
    const auto start = Clock::now();
    schedule.set_last_step(step);
    if (!graphed) optimizer.zero_grad();
    auto [x, y] = corpus.window_batch(data::TextSplit::kTrain, step, run.batch_size,
                                      config.context, run.seed, host);
    const bool trace_now = tracer.before(step - first_step + 1);
    if (plan) step_peaks.before_step();
    const auto step_start = Clock::now();
    const pipeline::StepResult r =
        graphed ? graphed_step(pipe, optimizer, scaler, x, y, loss_fn, log, config.grad_clip)
                : train_one_step(pipe, processes.get(), x, y, loss_fn, log,
                                 {.loss_scale = scaler.scale(), .device_timeline = trace_now});
    if (plan && step > first_step) {
      planned_step_seconds += seconds_since(step_start);
      ++planned_steps;
      step_peaks.after_step();
    }
    if (!graphed) optimizer_step(pipe, optimizer, scaler, config.grad_clip);
    train_seconds += seconds_since(start);
    if (trace_now) tracer.after(r);
    meter->add(r);
    result.step_losses.push_back(r.loss);
    loss_sum += r.loss;
    ++steps_since;
    const bool report = (step + 1) % config.eval_every == 0 || step + 1 == last_step;
    if (!report) continue;
    GptReport rep;
    rep.step = step + 1;
    rep.train_loss = loss_sum / static_cast<double>(steps_since);
    rep.seconds = train_seconds;
    rep.tokens_per_second = static_cast<double>(steps_since * run.batch_size * config.context) /
                            train_seconds;
    PipelineStats stats = meter->finish();
    stats.graph_pool_bytes = pipe.graph_pool_bytes();
    if (plan) step_peaks.fold_stretch(stats.peak_bytes);
    rep.val_loss = validation_loss(pipe, corpus, config, config.eval_windows, host);
    log << "step " << rep.step << "/" << config.steps << ": train loss "
        << nats_and_bits(rep.train_loss) << " | val loss " << nats_and_bits(rep.val_loss) << " | "
        << format_fixed(rep.seconds, 1) << " s | "
        << format_count(rep.tokens_per_second) << " tokens/s" << bubble_and_memory(stats, devices)
        << "\n" << std::flush;
    result.reports.push_back(rep);
    stretches.push_back(stats);
    report_numbers.push_back(static_cast<int64_t>(result.reports.size()));
    if (!run.save.empty()) {
      save_run_checkpoint(run.save, pipe, optimizer,
                          {{"step", std::to_string(step + 1)}, {"config", fingerprint(config)}},
                          step + 1, processes.get());
    }
    meter = std::make_unique<PipelineMeter>(workers, processes.get());
    loss_sum = train_seconds = 0;
    steps_since = 0;
  }
  for (auto& [name, tensor] : pipe.module().state_dict()) {
    result.final_state.emplace_back(name, tensor.to(Device::cpu(0)).clone());
  }
  print_steady_state(log, stretches, "report", report_numbers, devices);
  if (plan && planned_steps > 0) {
    const double step_ms = 1000.0 * planned_step_seconds / static_cast<double>(planned_steps);
    print_plan_against_run(log, *plan, measured_run(step_ms, stretches, step_peaks), devices);
    result.planned_peaks = plan->peaks;
    result.step_peak_bytes = step_peaks.in_step();
  }
  tracer.report(log, last_step - first_step);
  if (last_step == config.steps) {
    result.final_val_loss = validation_loss(pipe, corpus, config, config.final_eval_windows, host);
    log << "final: val loss " << nats_and_bits(result.final_val_loss) << " on "
        << config.final_eval_windows << " windows of " << config.context << " characters\n";
    if (config.sample_chars > 0) {
      result.sample = sample(pipe, corpus, config, processes.get());
      log << "sample (temperature " << config.temperature << ", top-k "
          << (config.top_k > 0 ? std::to_string(config.top_k) : std::string("all"))
          << "):\n" << config.prompt << result.sample << "\n";
    }
    log << std::flush;
  }
  return result;
}

}  // namespace pipewright::examples
