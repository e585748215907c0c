// MpiProcesses' collectives: the reductions the pipeline asks for (losses, gradient norms,
// tied gradients) and those programs call (sums over replicas and the job, the trace,
// sharing the stages' state). Each is non-blocking and waited for by wait_for (a timeout,
// and other ranks' failure notices).
#include <algorithm>
#include <string>
#include <vector>

#include "distributed/mpi.h"
#include "distributed/mpi_processes.h"
#include "distributed/mpi_tensor.h"

namespace pipewright::distributed {

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

void MpiProcesses::sum_over_pipeline(nn::Tensors& tensors) {
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

}  // namespace pipewright::distributed
