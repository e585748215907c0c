// Several threads recording and running backward on independent graphs at once give the same
// results as running them one after another (no shared mutable state on the hot path).
#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <vector>

#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace pw = pipewright;
namespace ag = pipewright::autograd;
using pw::Tensor;

namespace {

Tensor uniform(const pw::Shape& shape, pw::Generator& generator, bool requires_grad) {
  Tensor t = Tensor::empty(shape);
  generator.uniform_(t, -1.0, 1.0);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

/// A small model trained for a few steps: linear - tanh - dropout - linear, with its own
/// parameters and random stream. Returns the final parameters and the last input gradient.
struct Job {
  explicit Job(uint64_t seed) : generator(seed) {
    w1 = uniform({16, 8}, generator, true);
    b1 = uniform({16}, generator, true);
    w2 = uniform({4, 16}, generator, true);
    x = uniform({32, 8}, generator, false);
  }

  void run(int steps) {
    pw::GeneratorGuard guard(generator);  // Dropout-style draws come from this thread's stream
    for (int s = 0; s < steps; ++s) {
      Tensor input = x.detach();
      input.set_requires_grad(true);
      Tensor h = ag::tanh(ag::linear(input, w1, b1));
      const uint64_t offset = pw::current_generator().reserve(ag::dropout_stream_length(h));
      h = ag::dropout(h, 0.25, pw::current_generator().seed(), offset);
      Tensor loss = ag::mean(ag::square(ag::linear(h, w2)));
      ag::WeightGradQueue queue;
      input_grad = ag::backward({loss}, {}, {input}, {.defer_weight_grads = &queue})[0];
      queue.run();
      ag::NoGradGuard no_grad;
      for (Tensor* p : {&w1, &b1, &w2}) {
        Tensor param = *p;
        pw::ops::add_(param, p->grad(), -0.1);
        p->impl()->grad.reset();
      }
    }
  }

  pw::Generator generator;
  Tensor w1, b1, w2, x, input_grad;
};

}  // namespace

TEST_CASE("two threads training independent graphs match a sequential run") {
  constexpr int kSteps = 20;
  Job seq_a(1), seq_b(2);
  seq_a.run(kSteps);
  seq_b.run(kSteps);

  Job par_a(1), par_b(2);
  std::thread ta([&] { par_a.run(kSteps); });
  std::thread tb([&] { par_b.run(kSteps); });
  ta.join();
  tb.join();

  for (auto [seq, par] : {std::pair{&seq_a, &par_a}, std::pair{&seq_b, &par_b}}) {
    // The same arithmetic in the same order on another thread: bit for bit.
    CHECK(pw::ops::equal(seq->w1, par->w1));
    CHECK(pw::ops::equal(seq->b1, par->b1));
    CHECK(pw::ops::equal(seq->w2, par->w2));
    CHECK(pw::ops::equal(seq->input_grad, par->input_grad));
  }
  // The two jobs really differ (different seeds), so the comparison is not vacuous.
  CHECK(pw::ops::max_abs_diff(seq_a.w1, seq_b.w1) > 1e-3);
}
