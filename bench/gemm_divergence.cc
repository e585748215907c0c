// How far two correct GEMMs drive the same training run apart (Note [Two correct GEMMs],
// tests/examples/cross_run.h): the GPU-versus-CPU tests' runs, on the CPU, once with OpenBLAS's
// GEMM and once with Eigen's (tensor/cpu/gemm.h), for many seeds; per run the distance, and
// the worst over all seeds per model, optimizer and schedule. The bounds of
// tests/examples/cross_run.h come from its output (docs/cuda.md, "Precision against the CPU
// kernels").
//
//   tools/bazel run //bench:gemm_divergence -- [seeds] [first_seed] [filter]
// (filter: run only the cases whose "model optimizer schedule checkpoint" contains it)
//   OPENBLAS_CORETYPE=Haswell tools/bazel run //bench:gemm_divergence   (another OpenBLAS kernel)
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/cpu/gemm.h"
#include "tests/examples/cross_run.h"

using namespace pipewright;

int main(int argc, char** argv) {
  const int seeds = argc > 1 ? std::atoi(argv[1]) : 10;
  const int first_seed = argc > 2 ? std::atoi(argv[2]) : 0;
  const std::string filter = argc > 3 ? argv[3] : "";
  const std::vector<Device> cpus = {Device::cpu(0), Device::cpu(1)};
  struct Case {
    std::string model, optimizer, schedule;
    pipeline::Checkpoint checkpoint;
  };
  std::vector<Case> cases;
  for (const char* model : {"relu", "smooth"}) {
    for (const char* optimizer : {"sgd", "adam"}) {
      cases.push_back({model, optimizer, "gpipe", pipeline::Checkpoint::kNever});
      cases.push_back({model, optimizer, "1f1b", pipeline::Checkpoint::kNever});
      cases.push_back({model, optimizer, "gpipe", pipeline::Checkpoint::kAlways});
    }
  }
  cases.push_back({"autoencoder", "sgd", "gpipe", pipeline::Checkpoint::kNever});
  cases.push_back({"autoencoder", "sgd", "1f1b", pipeline::Checkpoint::kExceptLast});
  std::printf("model optimizer schedule checkpoint seed | first_loss worst_step_loss (step) "
              "train_loss accuracy test_loss state_ratio (worst state element)\n");
  for (const Case& c : cases) {
    const std::string checkpoint = pipeline::to_string(c.checkpoint);
    const std::string name = c.model + " " + c.optimizer + " " + c.schedule + " " + checkpoint;
    if (name.find(filter) == std::string::npos) continue;
    testing::RunDistance worst;
    const examples::Task task = c.model == "relu"     ? examples::classifier_task()
                                : c.model == "smooth" ? testing::smooth_task()
                                                      : testing::autoencoder_cross_run_task();
    for (int s = first_seed; s < first_seed + seeds; ++s) {
      const auto seed = static_cast<uint64_t>(s);
      const examples::TrainConfig config =
          c.model == "autoencoder"
              ? testing::autoencoder_cross_run_config(cpus, c.schedule, c.checkpoint, seed)
              : testing::cross_run_config(cpus, c.schedule, c.checkpoint, c.optimizer, seed);
      std::ostringstream log;
      cpu::set_gemm_backend(cpu::GemmBackend::kOpenBlas);
      const examples::TrainResult openblas = examples::train(config, log, task);
      cpu::set_gemm_backend(cpu::GemmBackend::kEigen);
      const examples::TrainResult eigen = examples::train(config, log, task);
      const testing::RunDistance d = testing::distance(openblas, eigen);
      std::printf("%s %s %s %s %d | %.2e %.2e (%zu) %.2e %.4f %.2e %.3g (%s)\n",
                  c.model.c_str(), c.optimizer.c_str(), c.schedule.c_str(), checkpoint.c_str(), s,
                  d.first_loss, d.worst_step_loss, d.worst_step, d.train_loss, d.accuracy,
                  d.test_loss, d.state_ratio, d.worst_state.c_str());
      std::fflush(stdout);
      worst.first_loss = std::max(worst.first_loss, d.first_loss);
      worst.worst_step_loss = std::max(worst.worst_step_loss, d.worst_step_loss);
      worst.train_loss = std::max(worst.train_loss, d.train_loss);
      worst.accuracy = std::max(worst.accuracy, d.accuracy);
      worst.test_loss = std::max(worst.test_loss, d.test_loss);
      worst.state_ratio = std::max(worst.state_ratio, d.state_ratio);
    }
    std::printf("WORST %s %s %s %s over %d seeds | %.2e %.2e %.2e %.4f %.2e %.3g\n",
                c.model.c_str(), c.optimizer.c_str(), c.schedule.c_str(), checkpoint.c_str(),
                seeds, worst.first_loss, worst.worst_step_loss, worst.train_loss, worst.accuracy,
                worst.test_loss, worst.state_ratio);
  }
}
