// End-to-end: the character-level GPT example (examples/char_gpt) with a tiny model on the
// real corpus (Debian's fortunes, installed by tools/bazel): the loss falls, the tied copies
// of the embedding stay bitwise equal, and a checkpoint resumes bitwise under the same cut and
// to float rounding under another one.
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "examples/char_gpt/trainer.h"
#include "tests/compare.h"

using namespace pipewright;
using examples::GptConfig;
using examples::train_char_gpt;
using pipewright::testing::bitwise_equal;

namespace {

GptConfig tiny() {
  GptConfig c = examples::char_gpt_defaults();
  c.layers = 2;
  c.dim = 16;
  c.heads = 2;
  c.context = 16;
  c.dropout = 0.1;
  c.steps = 40;
  c.warmup = 4;
  c.eval_every = 20;
  c.eval_windows = 16;
  c.final_eval_windows = 16;
  c.sample_chars = 20;
  c.run.batch_size = 8;
  c.run.workers = 2;
  c.run.chunks = 4;
  c.run.lr = 1e-2;
  c.run.progress = false;
  return c;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

const Tensor& state(const examples::GptResult& r, const std::string& name) {
  for (const auto& [n, t] : r.final_state) {
    if (n == name) return t;
  }
  throw std::invalid_argument("no " + name);
}

}  // namespace

TEST_CASE("a tiny char GPT learns, its tied copies stay bitwise equal, it samples") {
  std::ostringstream log;
  const GptConfig config = tiny();
  const examples::GptResult r = train_char_gpt(config, log);
  INFO(log.str());
  REQUIRE(r.reports.size() == 2);
  CHECK(r.reports[1].train_loss < r.reports[0].train_loss);
  CHECK(r.reports[1].val_loss < std::log(100.0));  // far below the uniform guess over ~114
  CHECK(r.reports[1].train_loss < r.step_losses.front() - 0.5);  // from ~ln(114) = 4.74
  CHECK(bitwise_equal(state(r, "0.wte.weight"), state(r, "4.weight")));  // the LM head's copy
  CHECK(r.sample.size() == 20);
  CHECK(log.str().find("tokens/s") != std::string::npos);
  CHECK(log.str().find("bits/char") != std::string::npos);
}

TEST_CASE("char GPT with --plan auto trains the planner's cut, its tied copies still equal") {
  std::ostringstream log;
  GptConfig config = tiny();
  config.steps = 20;
  config.eval_every = 20;
  config.sample_chars = 0;
  config.run.plan = "auto";
  config.run.explain = true;
  const examples::GptResult r = train_char_gpt(config, log);
  INFO(log.str());
  REQUIRE(r.reports.size() == 1);
  CHECK(r.reports[0].train_loss < r.step_losses.front());
  CHECK(bitwise_equal(state(r, "0.wte.weight"), state(r, "4.weight")));
  CHECK(log.str().find("| planned: ") != std::string::npos);
  CHECK(log.str().find("timeline, replayed") != std::string::npos);  // --explain
  CHECK(log.str().find("plan vs run: step predicted") != std::string::npos);
  // Each device's peak within train_step lies within the plan's bounds, the tied embedding's
  // gradient copy included.
  CHECK(log.str().find("peak cpu:1: predicted") != std::string::npos);
  REQUIRE(r.planned_peaks.size() == r.step_peak_bytes.size());
  REQUIRE_FALSE(r.planned_peaks.empty());
  for (size_t w = 0; w < r.planned_peaks.size(); ++w) {
    CAPTURE(w, r.planned_peaks[w].low, r.planned_peaks[w].predicted, r.planned_peaks[w].high);
    CHECK(r.step_peak_bytes[w] >= r.planned_peaks[w].low);
    CHECK(r.step_peak_bytes[w] <= r.planned_peaks[w].high);
  }
}

TEST_CASE("char GPT resumes bitwise under the same cut and to rounding under another") {
  std::ostringstream log;
  const GptConfig full = tiny();
  const examples::GptResult straight = train_char_gpt(full, log);

  GptConfig first = full;
  first.stop_after = 20;
  first.run.save = temp_path("char_gpt.safetensors");
  train_char_gpt(first, log);

  GptConfig same = full;
  same.run.resume = first.run.save;
  const examples::GptResult again = train_char_gpt(same, log);
  REQUIRE(again.step_losses.size() == 20);
  for (size_t i = 0; i < 20; ++i) CHECK(again.step_losses[i] == straight.step_losses[20 + i]);

  // Another cut: ZB-V over 2 workers (4 stages in a V, the embedding and the LM head on one
  // worker) and 2 micro-batches instead of 1F1B over 2 workers and 4.
  GptConfig recut = same;
  recut.run.schedule = "zb-v";
  recut.run.chunks = 2;
  INFO(log.str());
  const examples::GptResult other = train_char_gpt(recut, log);
  REQUIRE(other.step_losses.size() == 20);
  for (size_t i = 0; i < 20; ++i) {
    CHECK(std::abs(other.step_losses[i] - straight.step_losses[20 + i]) <=
          1e-4 * straight.step_losses[20 + i]);
  }
}

TEST_CASE("char GPT's flash and fused attention train alike; an unknown kernel is refused") {
  GptConfig config = tiny();
  config.dropout = 0.0;  // with attention dropout the flash kernel hands over to the fused one
  config.steps = 12;
  config.eval_every = 12;
  config.sample_chars = 0;
  std::vector<double> losses[2];
  for (int i = 0; i < 2; ++i) {
    config.attention = i == 0 ? "flash" : "fused";
    std::ostringstream log;
    losses[i] = train_char_gpt(config, log).step_losses;
  }
  REQUIRE(losses[0].size() == 12);
  REQUIRE(losses[1].size() == 12);
  // The same function, summed in another order: the losses agree to float rounding, grown
  // over 12 AdamW steps.
  for (size_t s = 0; s < 12; ++s) CHECK(std::abs(losses[0][s] - losses[1][s]) < 1e-4);
  config.attention = "sdpa";
  std::ostringstream log;
  CHECK_THROWS_WITH(train_char_gpt(config, log),
                    "--attention sdpa: must be flash, fused or reference");
}
