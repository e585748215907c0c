#include "distributed/mpi_processes.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "distributed/gradient_buckets.h"
#include "distributed/mpi.h"
#include "pipeline/step.h"

namespace pipewright::distributed {
namespace {

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

MpiProcesses::MpiProcesses(MPI_Comm world, int workers, int replicas, int num_stages,
                           size_t bucket_bytes)
    : workers_(workers),
      replicas_(replicas),
      num_stages_(num_stages),
      bucket_bytes_(bucket_bytes) {
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
  gradients_ = std::make_unique<GradientBuckets>(
      stage_comm_, bucket_bytes_, 1.0 / replicas_,
      [this](MPI_Request& request, const std::string& what) { wait_for(request, what); });
}

MpiProcesses::~MpiProcesses() {
  link_.reset();
  gradients_.reset();  // leaks the buckets of a failed step (MPI may still use them)
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

void MpiProcesses::set_gradient_scale(double scale) { gradients_->set_scale(scale); }

void MpiProcesses::stage_finished(int stage, nn::Sequential& partition) {
  if (replicas_ == 1) return;
  gradients_->start(stage, partition);
}

void MpiProcesses::worker_finished(int /*worker*/, bool failed) {
  if (failed) {
    // The reductions started stay in flight (GradientBuckets::abandon), and no later step may
    // run (make_transport refuses).
    broken_ = true;
    gradients_->abandon();
    return;
  }
  try {
    gradients_->finish();
  } catch (...) {
    broken_ = true;
    throw;
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

}  // namespace pipewright::distributed
