// Your first pipewright program (docs/first_program.md): tensors from data, a model cut into
// a two-stage pipeline, training, evaluation, and the weights saved and loaded back.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim.h"
#include "nn/serialize.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

using namespace pipewright;

// 2 inputs -> 2 class scores (logits).
nn::Sequential make_model() {
  return nn::Sequential{nn::Linear(2, 32), nn::ReLU(), nn::Linear(32, 32), nn::ReLU(),
                        nn::Linear(32, 2)};
}

// Points x ~ N(0, 1) in the plane, labelled 1 in the first and third quadrants (x0·x1 > 0),
// 0 in the others: a problem no linear model solves.
struct Data {
  Tensor x;  // float32 [n, 2]
  Tensor y;  // int64 [n], the class of each row
};

Data make_data(int64_t n, Generator& generator) {
  Tensor x = Tensor::randn({n, 2}, generator);
  const std::vector<float> xs = x.to_vector<float>();
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(xs[2 * i] * xs[2 * i + 1] > 0 ? 1 : 0);
  return {x, Tensor::from_vector(labels, Shape{n})};
}

int main() {
  Generator generator(/*seed=*/7);
  GeneratorGuard seeded(generator);  // the weights' initialisation draws from it too
  const Data train = make_data(1024, generator), test = make_data(256, generator);

  // Stage 0 = the first 3 children on cpu:0, stage 1 = the last 2 on cpu:1; each mini-batch
  // is split into 4 micro-batches, run on the 1F1B schedule.
  pipeline::Pipe pipe(make_model(), {.balance = {3, 2},
                                     .devices = {Device::cpu(0), Device::cpu(1)},
                                     .chunks = 4,
                                     .schedule = {.name = "1f1b"}});
  nn::Adam opt(pipe.parameters(), {.lr = 0.01});

  // Mini-batches of 64 rows (slices are views: nothing is copied), the loss computed per
  // micro-batch on the last stage.
  for (int epoch = 1; epoch <= 20; ++epoch) {
    double loss = 0;
    for (int64_t i = 0; i < 1024; i += 64) {
      opt.zero_grad();
      loss += pipe.train_step(train.x.slice(i, i + 64), train.y.slice(i, i + 64),
                              nn::cross_entropy)
                  .loss;
      opt.step();
    }
    if (epoch % 5 == 0) std::printf("epoch %d: mean loss %.4f\n", epoch, loss / 16);
  }

  // Evaluation: eval mode keeps no autograd graph. The output is on the last stage's device.
  pipe.eval();
  const Tensor logits = pipe.forward(test.x);
  const std::vector<int64_t> predicted = ops::argmax(logits, 1).to_vector<int64_t>();
  const std::vector<int64_t> truth = test.y.to_vector<int64_t>();
  int correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
  const double accuracy = static_cast<double>(correct) / static_cast<double>(truth.size());
  std::printf("test accuracy %.3f (%d of %zu)\n", accuracy, correct, truth.size());

  // The weights, saved as safetensors with the model's own state_dict keys ("0.weight", ...),
  // loaded into a fresh model that runs without a pipeline.
  const std::string path =
      (std::filesystem::temp_directory_path() / "first_program.safetensors").string();
  nn::save_state_dict(path, pipe.module());
  nn::Sequential loaded = make_model();
  nn::load_state_dict(path, loaded);
  loaded.eval();
  const double diff = ops::max_abs_diff(loaded(test.x), logits);
  std::printf("weights saved to %s; the loaded model's outputs differ from the pipeline's by "
              "at most %g\n", path.c_str(), diff);
  return accuracy > 0.9 && diff < 1e-5 ? 0 : 1;  // non-zero: something went wrong
}
