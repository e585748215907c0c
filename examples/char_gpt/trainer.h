// Training the character-level GPT (model.h) through a pipeline on a text corpus: the
// example's engine, separate from main() so tests can run it with a tiny model.
//
// Every step takes `batch_size` windows of `context` characters from the training split
// (data/char_corpus.h: a function of the seed and the step, so the data position is the step)
// and runs Pipe::train_step on the chosen schedule, the cross-entropy computed per micro-batch
// on the last stage; then the gradients are clipped by their global norm (Pipe::clip_grad_norm)
// and AdamW steps (no weight decay on norms and biases: nn::weight_decay_groups) with a linear
// warmup and a cosine decay to min_lr_ratio · lr (nn::WarmupCosineLR). Every eval_every steps
// it prints the mean training loss since the last report and the validation loss on
// eval_windows fixed windows, in nats and bits per character, tokens/s, the bubble and each
// stage's peak memory; at the end the validation loss on final_eval_windows windows and a
// sample of sample_chars characters.
//
// Across processes (run.distributed, set by main() under mpirun) as the main job: rank =
// replica · workers + worker, rank 0 prints; the sample is drawn on rank 0 after every rank
// received the stages it does not train.
//
// Checkpoints (--save, after every report; --resume) hold the model and optimizer state by
// name, the step (the data position and the random step of Dropout's keyed masks) and the
// settings; a run resumes under another --workers, --balance, --schedule, --chunks or
// data-parallel degree (examples/common/run_checkpoint.h).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "examples/common/config.h"
#include "nn/module.h"
#include "pipeline/planner/memory_replay.h"

namespace pipewright::examples {

struct GptConfig {
  /// Shared settings (config.h): batch_size, lr, weight_decay, seed, the pipeline (workers,
  /// balance, chunks, checkpoint, schedule, virtual_stages, devices, threads, data_parallel),
  /// save / resume / trace, progress; data_dir is the corpus directory. Their defaults are
  /// set by char_gpt_defaults().
  TrainConfig run;
  // ---- model ----
  int layers = 4;
  int64_t dim = 128;
  int64_t heads = 4;
  int64_t context = 128;
  double dropout = 0.0;
  std::string attention = "flash";  // flash | fused | reference (nn::AttentionKernel)
  // ---- training ----
  int64_t steps = 600;           // the run's length (sets the learning-rate curve)
  int64_t stop_after = 0;        // stop after this step, to --resume later (0: run all)
  int64_t warmup = 60;           // steps of linear warmup
  double min_lr_ratio = 0.1;     // the cosine ends at this fraction of lr
  double beta1 = 0.9;            // AdamW's β1 (--beta1)
  double beta2 = 0.99;           // AdamW's β2 (--beta2; nanoGPT's for small character models)
  double eps = 1e-8;             // AdamW's ε (--eps)
  double grad_clip = 1.0;        // max global gradient norm (0: no clipping)
  // ---- reports and the sample ----
  int64_t eval_every = 100;      // steps between reports
  int64_t eval_windows = 64;     // validation windows per report
  int64_t final_eval_windows = 512;
  int64_t sample_chars = 400;
  double temperature = 0.8;
  int64_t top_k = 0;             // sample from the k likeliest characters (0: all)
  std::string prompt = "\n";
};

/// The defaults of the example: 4 workers, chunks 8, 1F1B, batch 32, lr 2e-3, weight decay
/// 0.1, no checkpointing, the fortunes corpus.
GptConfig char_gpt_defaults();

/// One report line's numbers.
struct GptReport {
  int64_t step = 0;               // 1-based: the report after this many steps
  double train_loss = 0;          // mean over the steps since the last report (nats/char)
  double val_loss = 0;            // on eval_windows validation windows (nats/char)
  double tokens_per_second = 0;   // training tokens over the training time since the last
  double seconds = 0;             //   report (evaluation excluded)
};

struct GptResult {
  std::vector<GptReport> reports;
  double final_val_loss = 0;      // on final_eval_windows windows (nats/char)
  std::string sample;             // the generated characters (after the prompt)
  std::vector<double> step_losses;  // every step's mini-batch loss (of the steps run here)
  nn::NamedTensors final_state;     // the model's state dict at the end (CPU copies)
  /// --plan auto: the plan's predicted peak per device, and the largest measured within
  /// train_step (after the first step; the optimizer's step apart).
  std::vector<pipeline::DevicePeak> planned_peaks;
  std::vector<int64_t> step_peak_bytes;
};

/// Throws std::invalid_argument naming the flag for a setting out of range (layers < 1, dim
/// or heads < 1, heads not dividing dim, context < 2, steps < 1, warmup < 0, grad_clip < 0,
/// temperature <= 0, top_k < 0, eval_every < 1, ...) and what validate(run, ...) throws.
void validate(const GptConfig& config);

/// Trains per `config`, printing to `out` (rank 0 only across processes). Throws
/// std::invalid_argument for bad settings, std::runtime_error for a missing corpus or a bad
/// checkpoint (naming the path), and whatever the pipeline throws.
GptResult train_char_gpt(const GptConfig& config, std::ostream& out);

}  // namespace pipewright::examples
