#include "distributed/mpi_processes.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "distributed/mpi.h"
#include "distributed/nccl.h"
#include "pipeline/step.h"
#include "tensor/ops.h"

namespace pipewright::distributed {
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt64:
      return MPI_INT64_T;
  }
  return MPI_BYTE;
}

Tensor on_host(const Tensor& t) {
  return t.device().is_cpu() ? t.contiguous() : t.contiguous().to(Device::cpu(0));
}

std::string what_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

/// One all-reduce in flight: gradients of one dtype, packed in parameter order.
struct MpiProcesses::Bucket {
  DType dtype = DType::kFloat32;
  std::vector<Tensor> grads;  // handles of the .grad tensors the sums go back to
  std::vector<char> buffer;
  MPI_Request request = MPI_REQUEST_NULL;
  int stage = 0;
};

/// A stage's CUDA gradients of one dtype, packed into one device buffer summed by NCCL.
struct MpiProcesses::DeviceBucket {
  Tensor flat;
  std::vector<Tensor> grads;
};

MpiProcesses::MpiProcesses(MPI_Comm world, int workers, int replicas, int num_stages,
                           size_t bucket_bytes)
    : workers_(workers),
      replicas_(replicas),
      num_stages_(num_stages),
      bucket_bytes_(bucket_bytes),
      scale_(replicas > 0 ? 1.0 / replicas : 1.0) {
  int size = 0;
  check(MPI_Comm_rank(world, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(world, &size), "MPI_Comm_size");
  if (workers < 1 || replicas < 1 || workers * replicas != size) {
    throw std::invalid_argument("MpiProcesses: " + std::to_string(size) + " ranks cannot hold " +
                                std::to_string(workers) + " pipeline workers x " +
                                std::to_string(replicas) + " data-parallel replicas (need " +
                                std::to_string(workers * replicas) + ")");
  }
  if (num_stages < workers || num_stages % workers != 0) {
    throw std::invalid_argument("MpiProcesses: " + std::to_string(num_stages) +
                                " stages do not divide over " + std::to_string(workers) +
                                " workers");
  }
  check(MPI_Comm_dup(world, &world_), "MPI_Comm_dup");
  ranks_on_node_ = node_ranks(world_, rank_).size;
  check(MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_split(world_, replica(), worker(), &replica_comm_), "MPI_Comm_split (replica)");
  check(MPI_Comm_split(world_, worker(), replica(), &stage_comm_), "MPI_Comm_split (stage)");
  check(MPI_Comm_set_errhandler(replica_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_set_errhandler(stage_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  link_ = std::make_shared<MpiLink>(replica_comm_, world_,
                                    "rank " + std::to_string(rank_) + " (replica " +
                                        std::to_string(replica()) + ", worker " +
                                        std::to_string(worker()) + ")");
}

MpiProcesses::~MpiProcesses() {
  link_.reset();
  // Buckets still pending belong to a failed step: MPI may still use their buffers, and a
  // non-blocking collective's request cannot be freed, so they are leaked on purpose.
  for (auto& b : abandoned_) {
    if (b->request != MPI_REQUEST_NULL) (void)b.release();
  }
  MPI_Comm_free(&replica_comm_);
  MPI_Comm_free(&stage_comm_);
  MPI_Comm_free(&world_);
}

std::unique_ptr<pipeline::Transport> MpiProcesses::make_transport(
    const std::vector<int>& stage_worker) {
  if (broken_) {
    throw std::logic_error(name() +
                           ": a previous step failed across processes; its "
                           "collectives may be unmatched, so no further step can run (end "
                           "the job)");
  }
  ++steps_;
  link_->drop_before(steps_);
  link_->check_failures();  // a notice that arrived between steps fails this one at once
  if (static_cast<int>(stage_worker.size()) != num_stages_) {
    throw std::invalid_argument(name() + ": the pipe has " + std::to_string(stage_worker.size()) +
                                " stages, the processes were set up for " +
                                std::to_string(num_stages_));
  }
  placement_ = stage_worker;
  return std::make_unique<MpiTransport>(link_, steps_, stage_worker);
}

int MpiProcesses::worker_of(int stage) const {
  return placement_.empty() ? stage % workers_ : placement_.at(static_cast<size_t>(stage));
}

void MpiProcesses::wait_for(MPI_Request& request, const std::string& what) {
  wait(request, name() + ": " + what, [this] { link_->check_failures(); });
}

// Note [Data-parallel gradients] (mpi_processes.h): pack, weight, start.
// With NCCL: per dtype, the stage's gradients are copied into one flat buffer on their
// device, weighted, summed in place by ncclAllReduce, all on the worker's current stream;
// worker_finished() copies the sums back on the same stream (no host wait anywhere).
void MpiProcesses::reduce_on_device(const std::vector<Tensor>& grads) {
  const Device device = grads.front().device();
  if (nccl_ == nullptr) nccl_ = std::make_unique<NcclGroup>(stage_comm_, device);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    DeviceBucket bucket;
    int64_t total = 0;
    for (const Tensor& g : grads) {
      if (g.dtype() != dtype) continue;
      bucket.grads.push_back(g);
      total += g.numel();
    }
    if (bucket.grads.empty()) continue;
    bucket.flat = Tensor::empty({total}, {dtype, device});
    int64_t offset = 0;
    for (const Tensor& g : bucket.grads) {
      Tensor slot = bucket.flat.slice(offset, offset + g.numel());
      slot.copy_from(g.contiguous().reshape({g.numel()}));
      offset += g.numel();
    }
    ops::mul_(bucket.flat, scale_);
    nccl_->all_reduce_sum(bucket.flat, Stream::current(device));
    pending_device_.push_back(std::move(bucket));
  }
}

void MpiProcesses::stage_finished(int stage, nn::Sequential& partition) {
  if (replicas_ == 1) return;
  if (nccl_available()) {
    std::vector<Tensor> on_gpu;
    for (const Tensor& p : partition.parameters()) {
      if (p.grad().defined() && p.grad().device().is_cuda()) on_gpu.push_back(p.grad());
    }
    if (!on_gpu.empty()) {
      reduce_on_device(on_gpu);
      return;  // a stage lives on one device: every gradient was on the GPU
    }
  }
  std::unique_ptr<Bucket> bucket;
  auto start = [&] {
    if (bucket == nullptr) return;
    check(MPI_Iallreduce(MPI_IN_PLACE, bucket->buffer.data(),
                         static_cast<int>(bucket->buffer.size() / element_size(bucket->dtype)),
                         mpi_type(bucket->dtype), MPI_SUM, stage_comm_, &bucket->request),
          "MPI_Iallreduce (gradients)");
    pending_.push_back(std::move(bucket));
  };
  for (const Tensor& p : partition.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;  // the same on every replica: same model, same schedule
    if (bucket != nullptr &&
        (bucket->dtype != g.dtype() || bucket->buffer.size() >= bucket_bytes_)) {
      start();
    }
    if (bucket == nullptr) {
      bucket = std::make_unique<Bucket>();
      bucket->dtype = g.dtype();
      bucket->stage = stage;
    }
    const Tensor host = on_host(g);
    const size_t offset = bucket->buffer.size();
    bucket->buffer.resize(offset + host.nbytes());
    char* out = bucket->buffer.data() + offset;
    const int64_t n = host.numel();
    if (g.dtype() == DType::kFloat32) {
      const auto* in = static_cast<const float*>(host.raw_data());
      auto* o = reinterpret_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(in[i] * scale_);
    } else if (g.dtype() == DType::kFloat64) {
      const auto* in = static_cast<const double*>(host.raw_data());
      auto* o = reinterpret_cast<double*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] * scale_;
    } else {
      throw std::invalid_argument("MpiProcesses: a gradient of dtype " +
                                  std::string(dtype_name(g.dtype())) + " cannot be averaged");
    }
    bucket->grads.push_back(g);
  }
  start();
}

void MpiProcesses::worker_finished(int worker, bool failed) {
  if (failed) {
    // The reductions started stay in flight: their buffers are kept (see ~MpiProcesses), and
    // no later step may run (make_transport refuses).
    broken_ = true;
    for (auto& b : pending_) abandoned_.push_back(std::move(b));
    pending_.clear();
    pending_device_.clear();
    return;
  }
  for (DeviceBucket& b : pending_device_) {
    int64_t offset = 0;
    for (Tensor& g : b.grads) {
      g.copy_from(b.flat.slice(offset, offset + g.numel()).reshape(g.shape()));
      offset += g.numel();
    }
  }
  pending_device_.clear();
  std::vector<std::unique_ptr<Bucket>> buckets;
  buckets.swap(pending_);
  for (size_t i = 0; i < buckets.size(); ++i) {
    Bucket& b = *buckets[i];
    try {
      wait_for(b.request, "all-reduce of stage " + std::to_string(b.stage) + "'s gradients");
    } catch (...) {
      broken_ = true;
      for (size_t k = i; k < buckets.size(); ++k) abandoned_.push_back(std::move(buckets[k]));
      throw;
    }
    const char* in = b.buffer.data();
    for (Tensor& g : b.grads) {
      Tensor host = Tensor::empty(g.shape(), {g.dtype(), Device::cpu(0)});
      std::memcpy(host.raw_data(), in, host.nbytes());
      in += host.nbytes();
      g.copy_from(host);
    }
  }
}

void MpiProcesses::step_finished(pipeline::Step& step) {
  // The losses exist on the last stage's rank only; every rank of the replica gets them.
  const int root = worker_of(step.num_stages - 1);
  MPI_Request request;
  check(MPI_Ibcast(step.losses.data(), static_cast<int>(step.losses.size()), MPI_DOUBLE, root,
                   replica_comm_, &request),
        "MPI_Ibcast (losses)");
  wait_for(request, "broadcast of the losses from worker " + std::to_string(root));
}

std::exception_ptr MpiProcesses::step_failed(const pipeline::Step& step, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const RemoteFailure&) {
    broken_ = true;
    return error;  // began elsewhere; its text already names where
  } catch (...) {
  }
  std::string text = name();
  if (std::optional<pipeline::Action> a = step.failed_action()) {
    text += ": stage " + std::to_string(a->stage) + ", micro-batch " +
            std::to_string(a->microbatch) + " (" + pipeline::action_letter(a->kind) + ")";
  }
  text += ": " + what_of(error);
  broken_ = true;
  link_->notify_failure(text);
  return std::make_exception_ptr(std::runtime_error(text));
}

double MpiProcesses::reduce_on(MPI_Comm comm, double value, const std::string& what, MPI_Op op) {
  double result = 0;
  MPI_Request request;
  check(MPI_Iallreduce(&value, &result, 1, MPI_DOUBLE, op, comm, &request),
        ("MPI_Iallreduce (" + what + ")").c_str());
  wait_for(request, what);
  return result;
}

double MpiProcesses::sum_over_replicas(double value) {
  if (replicas_ == 1) return value;
  return reduce_on(stage_comm_, value, "sum of the loss over replicas");
}

double MpiProcesses::combine_over_pipeline(double value, bool max) {
  return reduce_on(replica_comm_, value, max ? "maximum of the gradient norm over the pipeline"
                                          : "sum of the gradient norm over the pipeline",
                max ? MPI_MAX : MPI_SUM);
}

void MpiProcesses::sum_over_pipeline(std::vector<Tensor>& tensors) {
  for (Tensor& t : tensors) {
    t = t.to(Device::cpu(0)).contiguous();
    if (t.numel() == 0) continue;
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()),
                         mpi_type(t.dtype()), MPI_SUM, replica_comm_, &request),
          "MPI_Iallreduce (tied gradients)");
    wait_for(request, "sum of tied gradients over the pipeline");
  }
}

double MpiProcesses::sum_over_job(double value) {
  return reduce_on(world_, value, "sum over the job");
}

void MpiProcesses::max_over_job(std::vector<double>& values) {
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                       MPI_MAX, world_, &request),
        "MPI_Iallreduce (max)");
  wait_for(request, "maximum over the job");
}

pipeline::Trace MpiProcesses::gather_trace(const pipeline::Trace& local) {
  constexpr int kFields = 5;  // stage, kind, micro-batch, start, end
  std::vector<double> mine;
  for (const pipeline::TraceEvent& e : local.events()) {
    mine.insert(mine.end(), {static_cast<double>(e.stage), static_cast<double>(e.kind),
                             static_cast<double>(e.microbatch), e.start_us, e.end_us});
  }
  int size = 0;
  check(MPI_Comm_size(world_, &size), "MPI_Comm_size");
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_Request request;
  check(MPI_Igather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world_, &request),
        "MPI_Igather (trace sizes)");
  wait_for(request, "gather of the trace sizes");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<size_t>(r)] = total;
    total += counts[static_cast<size_t>(r)];
  }
  std::vector<double> all(static_cast<size_t>(std::max(total, 1)));
  check(MPI_Igatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                     MPI_DOUBLE, 0, world_, &request),
        "MPI_Igatherv (trace)");
  wait_for(request, "gather of the trace");
  if (rank_ != 0) return pipeline::Trace();
  pipeline::Trace trace(size);
  for (int r = 0; r < size; ++r) {
    for (int i = offsets[static_cast<size_t>(r)];
         i < offsets[static_cast<size_t>(r)] + counts[static_cast<size_t>(r)]; i += kFields) {
      const double* f = all.data() + i;
      trace.add({r, static_cast<int>(f[0]), static_cast<pipeline::ActionKind>(f[1]),
                 static_cast<int>(f[2]), f[3], f[4]});
    }
  }
  return trace;
}

void MpiProcesses::share_stage_state(const pipeline::Pipe& pipe) {
  const std::vector<nn::Sequential>& partitions = pipe.partitions();
  for (size_t s = 0; s < partitions.size(); ++s) {
    const int root = worker_of(static_cast<int>(s));
    for (auto& [name, t] : partitions[s].state_dict()) {
      Tensor host = worker() == root ? on_host(t).clone()
                                     : Tensor::empty(t.shape(), {t.dtype(), Device::cpu(0)});
      MPI_Request request;
      check(MPI_Ibcast(host.raw_data(), static_cast<int>(host.nbytes()), MPI_BYTE, root,
                       replica_comm_, &request),
            "MPI_Ibcast (state)");
      wait_for(request, "broadcast of stage " + std::to_string(s) + "'s " + name);
      if (worker() != root) {
        Tensor target = t;
        target.copy_from(host);
      }
    }
  }
}

void MpiProcesses::barrier() {
  MPI_Request request;
  check(MPI_Ibarrier(world_, &request), "MPI_Ibarrier");
  wait_for(request, "barrier");
}

std::pair<int64_t, int64_t> replica_rows(int64_t n, int replica, int replicas) {
  const int64_t base = n / replicas, extra = n % replicas;
  const int64_t begin = replica * base + std::min<int64_t>(replica, extra);
  return {begin, begin + base + (replica < extra ? 1 : 0)};
}

namespace {

// This replica's share of every split tensor of `tensors` (replicated ones whole).
nn::Tensors replica_share(const nn::Tensors& tensors, const std::vector<pipeline::ChunkSpec>& specs,
                          int64_t n, int64_t begin, int64_t end, const std::string& what) {
  std::vector<int64_t> sizes;
  for (int64_t size : {begin, end - begin, n - end}) {
    if (size > 0) sizes.push_back(size);
  }
  const size_t mine = begin > 0 ? 1 : 0;
  return pipeline::split_to(tensors, specs, sizes, what).at(mine);
}

}  // namespace

pipeline::StepResult train_step(pipeline::Pipe& pipe, MpiProcesses& processes, const Tensor& input,
                                const Tensor& target, const pipeline::LossFn& loss_fn) {
  if (!input.defined() || !target.defined()) {
    throw std::invalid_argument("distributed::train_step: input and target must be defined");
  }
  if (input.dim() == 0) {
    throw std::invalid_argument("distributed::train_step: the input is a scalar (shape [])");
  }
  return train_step(pipe, processes, nn::Tensors{input}, nn::Tensors{target},
                    pipeline::as_tuple_loss(loss_fn));
}

pipeline::StepResult train_step(pipeline::Pipe& pipe, MpiProcesses& processes,
                                const nn::Tensors& inputs, const nn::Tensors& targets,
                                const pipeline::TupleLossFn& loss_fn,
                                const pipeline::StepOptions& options) {
  if (pipe.options().processes.get() != &processes) {
    throw std::invalid_argument(
        "distributed::train_step: the Pipe was built with other "
        "PipeOptions::processes than the MpiProcesses given");
  }
  // N: one micro-batch of everything tells the batch size and checks the specs.
  const std::vector<pipeline::ChunkSpec> input_specs =
      pipeline::chunk_specs(options.input_chunks, inputs.size(), "input");
  int64_t n = -1;
  for (size_t i = 0; i < inputs.size() && n < 0; ++i) {
    if (input_specs[i].replicated || !inputs[i].defined() || inputs[i].dim() == 0) continue;
    const int64_t d = input_specs[i].dim < 0 ? input_specs[i].dim + inputs[i].dim()
                                             : input_specs[i].dim;
    if (d >= 0 && d < inputs[i].dim()) n = inputs[i].size(d);
  }
  if (n < 0 || processes.replicas() == 1) {
    // Nothing to share out (with n < 0, Pipe::train_step throws, naming what is wrong).
    processes.set_gradient_scale(1.0);
    return pipe.train_step(inputs, targets, loss_fn, options);
  }
  if (n < processes.replicas()) {
    throw std::invalid_argument("distributed::train_step: a batch of " + std::to_string(n) +
                                " rows cannot be shared by " +
                                std::to_string(processes.replicas()) + " replicas");
  }
  auto [begin, end] = replica_rows(n, processes.replica(), processes.replicas());
  const bool sum = options.reduction == pipeline::LossReduction::kSum;
  const double weight = sum ? 1.0 : static_cast<double>(end - begin) / static_cast<double>(n);
  processes.set_gradient_scale(weight);
  // Random layers key their draws by each row's index in the global batch (Note [Keyed
  // randomness], nn/random_key.h), so any data-parallel degree draws the same masks.
  pipeline::StepOptions share_options = options;
  share_options.first_sample = options.first_sample + begin;
  pipeline::StepResult result = pipe.train_step(
      replica_share(inputs, options.input_chunks, n, begin, end, "input"),
      replica_share(targets, options.target_chunks, n, begin, end, "target"), loss_fn,
      share_options);
  result.loss = processes.sum_over_replicas(result.loss * weight);
  return result;
}

}  // namespace pipewright::distributed
