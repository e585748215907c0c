// Run under mpirun (tests/distributed/run_mpi.sh): tied parameters across processes
// (Note [Tied parameters], pipeline/tied_parameters.h). A tiny GPT whose token embedding (first
// stage, rank 0) and LM head (last stage) are copies of one matrix, against the plain model
// whose head holds the embedding's very tensor (autograd sums both uses into one .grad). Each
// rank computes that reference itself (same seed, the global batch, one process) and checks
// every copy it holds:
//   - after the first step its gradient is the plain model's summed one (relative 1e-5: the
//     pipeline sums micro-batches', replicas' and the two stages' shares in another order than
//     one backward over the whole batch, so float rounding differs; bitwise is not possible);
//   - Pipe::clip_grad_norm counts the tied matrix once across processes (relative 1e-5);
//   - after every step its gradient, and after kSteps AdamW steps its value, are bitwise equal
//     to rank 0's embedding (broadcast), so the copies on every rank move alike;
//   - after kSteps steps its value is close to the plain model's trained the same way.
//
//   mpirun -np 2 tied_main 1      (2 workers)
//   mpirun -np 4 tied_main 2      (2 workers x 2 replicas)
//
// Exit status 0 when every comparison on every rank passed.
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/linear.h"
#include "autograd/shape_ops.h"
#include "distributed/mpi.h"
#include "distributed/mpi_processes.h"
#include "nn/clip_grad.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/normalization.h"
#include "nn/optim.h"
#include "nn/transformer.h"
#include "pipeline/pipe.h"
#include "tensor/generator.h"
#include "tests/pipeline/pipe_test_util.h"

namespace {

using namespace pipewright;

constexpr int64_t kVocab = 11, kDim = 8, kHeads = 2, kRowsPerReplica = 4, kSeq = 5;
constexpr int kSteps = 5;
// Measured here: about one float ulp (1.3e-7 relative, 1.8e-7 absolute); a copy that misses
// the other stage's share of the gradient is off by 0.5 relative, 0.07 absolute.
constexpr double kGradTol = 1e-5;    // relative to max |plain gradient|
constexpr double kWeightTol = 1e-5;  // absolute, after kSteps AdamW steps of lr 1e-2
const char* const kEmbedding = "0.weight";
const char* const kHead = "5.weight";

int failures = 0;
int rank = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::cerr << "rank " << rank << ": FAILED " << what << "\n";
  }
}

/// x [*, C] -> x · weightᵀ [*, V] with `weight` [V, C] given: the plain model passes the
/// embedding's own tensor (one parameter in two places).
class SharedHead : public nn::Module {
 public:
  explicit SharedHead(const Tensor& weight) : weight_(register_parameter("weight", weight)) {}
  using Module::forward;
  Tensor forward(const Tensor& x) override { return autograd::linear(x, weight_); }
  std::string str() const override { return "SharedHead()"; }

 private:
  Tensor weight_;
};

/// Embedding | block | block | block | LayerNorm | head: six children, identical for every
/// rank. `shared`: the head uses the embedding's tensor (the plain reference); else its own
/// Linear (the Pipe's copy, which the Pipe overwrites with the embedding's value).
nn::Sequential gpt(bool shared) {
  Generator generator(17);
  GeneratorGuard guard(generator);
  auto embedding = std::make_shared<nn::Embedding>(kVocab, kDim);
  nn::Sequential m;
  m.push_back(embedding);
  for (int i = 0; i < 3; ++i) m.push_back(nn::TransformerBlock(kDim, kHeads));
  m.push_back(nn::LayerNorm(kDim));
  if (shared) {
    m.push_back(SharedHead(embedding->weight()));
  } else {
    m.push_back(nn::Linear(kDim, kVocab, /*bias=*/false));
  }
  return m;
}

/// Token ids in [0, kVocab), [n, kSeq] int64.
Tensor tokens(int64_t n, uint64_t seed) {
  Tensor u = Tensor::empty({n, kSeq});
  Generator(seed).uniform_(u, 0.0, static_cast<double>(kVocab));
  return u.to(DType::kInt64);
}

/// Cross-entropy of logits [b, T, V] against targets [b, T].
Tensor lm_loss(const Tensor& logits, const Tensor& target) {
  return nn::cross_entropy(autograd::reshape(logits, {target.numel(), kVocab}),
                           autograd::reshape(target, {target.numel()}).to(logits.device()));
}

Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters()) {
    if (n == name) return p;
  }
  throw std::invalid_argument("no parameter " + name);
}

/// The plain model's parameters, the shared matrix once (its head lists it again).
nn::Tensors unique_parameters(const nn::Module& m) {
  nn::Tensors out;
  for (const auto& [name, p] : m.named_parameters()) {
    if (name != kHead) out.push_back(p);
  }
  return out;
}

/// max |a - b| / max |b|.
double rel_diff(const Tensor& a, const Tensor& b) {
  return pipeline::testing::max_diff(a, b) / pipeline::testing::max_abs(b);
}

/// The bytes of rank 0's `t` (`nbytes` of them, zeros for an undefined `t`; ignored on other
/// ranks), on every rank: what each rank compares its copies with bitwise. Collective over the job.
std::string rank0_bytes(const Tensor& t, size_t nbytes) {
  std::string bytes = rank == 0 && t.defined() ? pipeline::testing::bytes_of(t)
                                               : std::string(nbytes, '\0');
  if (bytes.size() != nbytes) throw std::logic_error("rank0_bytes: rank 0 has another size");
  distributed::check(
      MPI_Bcast(bytes.data(), static_cast<int>(nbytes), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return bytes;
}

struct Config {
  std::string schedule;
  std::vector<int> balance;
  int virtual_stages;
};

void run(const Config& c, int workers, int replicas) {
  const std::string where = c.schedule + " (" + std::to_string(workers) + " workers x " +
                            std::to_string(replicas) + " replicas)";
  const int stages = workers * c.virtual_stages;
  auto processes =
      std::make_shared<distributed::MpiProcesses>(MPI_COMM_WORLD, workers, replicas, stages);
  pipeline::Pipe pipe(gpt(false), {.balance = c.balance,
                                   .devices = pipeline::testing::cpus(0, workers),
                                   .chunks = 2,
                                   .schedule = {.name = c.schedule,
                                                .virtual_stages = c.virtual_stages},
                                   .tied_parameters = {{kEmbedding, kHead}},
                                   .threads_per_worker = 1,
                                   .processes = processes});
  nn::Sequential plain = gpt(true);

  // The copies this rank holds: the embedding with stage 0, the head with the last stage.
  std::vector<std::pair<std::string, Tensor>> held;
  if (pipe.runs_stage(0)) held.emplace_back(kEmbedding, param(pipe.module(), kEmbedding));
  if (pipe.runs_stage(stages - 1)) held.emplace_back(kHead, param(pipe.module(), kHead));
  const double copies = processes->sum_over_job(static_cast<double>(held.size()));
  expect(copies == 2.0 * replicas, where + ": the job holds " + std::to_string(copies) +
                                       " copies, want 2 per replica");
  // Rank 0 runs worker 0, hence stage 0 in every placement: its embedding is the yardstick.
  if (rank == 0 && (held.empty() || held.front().first != kEmbedding)) {
    throw std::logic_error(where + ": rank 0 does not hold the embedding");
  }
  const Tensor rank0_copy = rank == 0 ? held.front().second : Tensor();
  const size_t nbytes = static_cast<size_t>(kVocab * kDim) * sizeof(float);

  const Tensor want_init = param(plain, kEmbedding);
  for (const auto& [name, p] : held) {
    expect(pipeline::testing::bytes_of(p) == pipeline::testing::bytes_of(want_init),
           where + ": " + name + " as built is not the plain embedding's value");
  }

  const nn::AdamWOptions adamw = {.lr = 1e-2};
  nn::AdamW opt(nn::weight_decay_groups(pipe.parameters(), 0.1), adamw);
  nn::AdamW plain_opt(nn::weight_decay_groups(unique_parameters(plain), 0.1), adamw);
  const double max_norm = 0.5;
  const int64_t n = kRowsPerReplica * replicas;
  double worst_grad = 0;
  for (int step = 0; step < kSteps; ++step) {
    const std::string at = where + " step " + std::to_string(step);
    const Tensor x = tokens(n, 10 + static_cast<uint64_t>(step));
    const Tensor y = tokens(n, 50 + static_cast<uint64_t>(step));
    opt.zero_grad();
    plain_opt.zero_grad();
    const Tensor plain_loss = lm_loss(plain.forward(x), y);
    plain_loss.backward();
    const pipeline::StepResult r = distributed::train_step(pipe, x, y, lm_loss);
    expect(std::abs(r.loss - plain_loss.item()) <= 1e-5,
           at + ": loss " + std::to_string(r.loss) + ", want " + std::to_string(plain_loss.item()));

    const Tensor want_grad = param(plain, kEmbedding).grad();
    const std::string root_grad = rank0_bytes(rank == 0 ? rank0_copy.grad() : Tensor(), nbytes);
    for (const auto& [name, p] : held) {
      if (!p.grad().defined()) {
        expect(false, at + ": " + name + " has no gradient");
        continue;
      }
      expect(pipeline::testing::bytes_of(p.grad()) == root_grad,
             at + ": " + name + "'s gradient differs from rank 0's embedding's");
      if (step > 0) continue;  // later the weights differ from the plain model's by rounding
      const double d = rel_diff(p.grad(), want_grad);
      worst_grad = std::max(worst_grad, d);
      expect(d <= kGradTol, at + ": " + name + "'s gradient differs from the plain model's by " +
                                std::to_string(d) + " (relative; tolerance " +
                                std::to_string(kGradTol) + ")");
    }

    const double want_norm = nn::clip_grad_norm(unique_parameters(plain), max_norm);
    const double norm = pipe.clip_grad_norm(max_norm);
    expect(std::abs(norm - want_norm) <= 1e-5 * want_norm,
           at + ": gradient norm " + std::to_string(norm) + ", want " + std::to_string(want_norm));
    pipe.step(opt);
    plain_opt.step();
  }

  const std::string root_value = rank0_bytes(rank0_copy, nbytes);
  double worst_weight = 0;
  for (const auto& [name, p] : held) {
    expect(pipeline::testing::bytes_of(p) == root_value,
           where + ": after " + std::to_string(kSteps) + " steps " + name +
               " differs from rank 0's embedding");
    const double d = pipeline::testing::max_diff(p, param(plain, kEmbedding));
    worst_weight = std::max(worst_weight, d);
    expect(d <= kWeightTol, where + ": after " + std::to_string(kSteps) + " steps " + name +
                                " differs from the plain model's by " + std::to_string(d));
  }
  if (!held.empty()) {
    std::cout << "rank " << rank << ": " << where << ": " << held.size()
              << " copies; gradient vs plain " << worst_grad << " (relative), weight vs plain "
              << worst_weight << " after " << kSteps << " steps\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiSession mpi(&argc, &argv);
  rank = mpi.world_rank();
  const int replicas = argc > 1 ? std::atoi(argv[1]) : 1;
  const int workers = mpi.world_size() / replicas;
  // The embedding and the head on ranks 0 and 1 (GPipe, 1F1B), and both on rank 0 (ZB-V's V
  // puts the first and the last stage on worker 0; the other rank adds zeros to the sum).
  const std::vector<Config> configs = {
      {"gpipe", {3, 3}, 1}, {"1f1b", {2, 4}, 1}, {"zb-v", {1, 2, 2, 1}, 2}};
  try {
    for (const Config& c : configs) run(c, workers, replicas);
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": error: " << e.what() << "\n";
    mpi.abort(2);
  }
  int total = 0;
  distributed::check(MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
                     "MPI_Allreduce");
  if (rank == 0) {
    std::cout << configs.size() << " schedules on " << workers << " workers x " << replicas
              << " replicas: "
              << (total == 0 ? "every copy of the tied matrix equals the plain model's"
                             : std::to_string(total) + " comparisons FAILED")
              << "\n";
  }
  return total == 0 ? 0 : 1;
}
