// tools/bazel run //examples:char_gpt -- [flags]
// mpirun -np 4 bazel-bin/examples/char_gpt            (one stage per rank)
//
// Trains a character-level GPT on Debian's fortunes (English quotes, jokes and verse) through
// pipewright's pipeline on virtual CPU devices: every --eval-every steps the train and
// validation loss (nats and bits per character), tokens/s, bubble and peak memory per stage;
// at the end the validation loss and a sample of the text it learned to write. --help lists
// every flag. Under mpirun every rank runs this program, as the main job's (fashion_mnist).
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "examples/char_gpt/trainer.h"
#include "examples/common/example_main.h"
#include "examples/common/flags.h"

int main(int argc, char** argv) {
  using namespace pipewright::examples;
  GptConfig config = char_gpt_defaults();

  CLI::App app{"Train a character-level GPT on Debian's fortunes through a pipewright pipeline."};
  TrainFlags flags(app, config.run, kCommonFlags | kPipelineFlags | kFileFlags);
  app.add_option("--data-parallel", config.run.data_parallel,
                 "Replicas of the pipeline, each on its share of every mini-batch (needs "
                 "mpirun -np workers*data-parallel)");
  app.add_option("--data-dir", config.run.data_dir,
                 "Directory of text files (default: Debian's fortunes, /usr/share/games/fortunes)");
  app.add_option("--layers", config.layers, "Transformer blocks");
  app.add_option("--dim", config.dim, "Model width (embedding size)");
  app.add_option("--heads", config.heads, "Attention heads (dividing --dim)");
  app.add_option("--context", config.context, "Characters per window (the longest context)");
  app.add_option("--dropout", config.dropout, "Dropout of embeddings, attention and MLP");
  app.add_option("--attention", config.attention,
                 "Attention kernel: flash (tiled, no [B, H, T, T] tensor; the default), fused "
                 "(batched products around one causal-softmax kernel) or reference (unfused ops)");
  app.add_option("--steps", config.steps, "Training steps (mini-batches) of the run");
  app.add_option("--stop-after", config.stop_after,
                 "Stop after this step (resume later with --resume; 0: run all)");
  app.add_option("--warmup", config.warmup, "Steps of linear learning-rate warmup");
  app.add_option("--min-lr-ratio", config.min_lr_ratio,
                 "The cosine decays to this fraction of --lr");
  app.add_option("--beta1", config.beta1, "AdamW's beta1, in [0, 1)");
  app.add_option("--beta2", config.beta2,
                 "AdamW's beta2, in [0, 1) (0.95 in GPT-2-style recipes)");
  app.add_option("--eps", config.eps, "AdamW's epsilon, >= 0");
  app.add_option("--grad-clip", config.grad_clip, "Max global gradient norm (0: no clipping)");
  app.add_option("--eval-every", config.eval_every, "Steps between reports");
  app.add_option("--eval-windows", config.eval_windows,
                 "Validation windows scored at each report");
  app.add_option("--final-eval-windows", config.final_eval_windows,
                 "Validation windows scored at the end");
  app.add_option("--sample-chars", config.sample_chars, "Characters sampled at the end");
  app.add_option("--temperature", config.temperature, "Sampling temperature");
  app.add_option("--top-k", config.top_k, "Sample from the k likeliest characters (0: all)");
  app.add_option("--prompt", config.prompt, "Text the sample starts from");
  CLI11_PARSE(app, argc, argv);

  return run_example(&argc, &argv, config.run, [&] {
    flags.apply();
    train_char_gpt(config, std::cout);
  });
}
