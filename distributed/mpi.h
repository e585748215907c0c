// MPI for pipewright: starting it, its errors as exceptions, and waits that cannot hang.
//
//   distributed::MpiSession mpi(&argc, &argv);   // once, in main(); MPI_Finalize at scope end
//   if (mpi.world_size() > 1) { ... distributed::MpiProcesses ... }
//
// The library uses Debian's OpenMPI (libopenmpi-dev); the communication thread of
// MpiProcesses and the workers call MPI concurrently, so MPI must provide
// MPI_THREAD_MULTIPLE (OpenMPI 4.1 does).
//
// Note [What MPI guarantees when a rank dies]
// MPI itself promises nothing after a process fails: a blocking call may wait forever.
// OpenMPI's mpirun does watch its children: when one exits abnormally (a signal, or a
// non-zero exit status before MPI_Finalize) it kills every other rank of the job and exits
// non-zero ("mpirun noticed that process rank 1 ... exited on signal 9"). What pipewright
// adds on top: (1) every wait of its own (a message, a reduction, a broadcast) polls a
// non-blocking request and gives up with MpiTimeout after timeout_seconds(), so a rank whose
// peer stopped answering without dying (or a job launched by something other than mpirun)
// ends with an error instead of hanging; (2) a rank whose step fails tells every other rank
// (MpiProcesses, Note [Failure notices]), whose waits then throw RemoteFailure at once.
// Programs (not the library) end the job with MPI_Abort after printing the error.
#pragma once

#include <mpi.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace pipewright::distributed {

/// An MPI call failed; the message names the call and MPI's error string.
class MpiError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A wait gave up after timeout_seconds(); the message names what was awaited.
class MpiTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Another rank failed first; the message is that rank's description of its failure.
class RemoteFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws MpiError("<what>: <MPI error string>") unless rc == MPI_SUCCESS.
void check(int rc, const char* what);

/// This process's place among the ranks of `comm` that share its node (MPI_COMM_TYPE_SHARED):
/// its rank there and how many there are. `rank` is its rank in `comm`. Throws MpiError.
struct NodeRanks {
  int rank = 0;
  int size = 1;
};
NodeRanks node_ranks(MPI_Comm comm, int rank);

/// Whether this process was started by mpirun / mpiexec (OpenMPI's or PMI's environment).
bool launched_by_mpirun();

/// Seconds a wait may last before MpiTimeout: $PIPEWRIGHT_MPI_TIMEOUT, default 300.
double timeout_seconds();

/// Polls `request` until it completes. Between polls it sleeps (from 20 µs up to 200 µs, so
/// ranks sharing cores do not spin) and calls `interrupted`, which may throw to stop waiting
/// (the request is then left active: its buffers must outlive it). Throws MpiTimeout naming
/// `what` after timeout_seconds(), MpiError when MPI reports an error.
void wait(MPI_Request& request, const std::string& what,
          const std::function<void()>& interrupted = {});

/// MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is already initialised, and MPI_Finalize
/// at destruction (only if this object initialised it). Errors on MPI_COMM_WORLD return
/// codes (MPI_ERRORS_RETURN) instead of aborting. Throws MpiError when MPI cannot start or
/// provides less than MPI_THREAD_MULTIPLE.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  /// The rank among the processes of this machine (torchrun's LOCAL_RANK).
  int local_rank() const { return local_rank_; }
  /// Ends every rank of the job with `status` (MPI_Abort). For programs, never the library.
  [[noreturn]] void abort(int status) const;

 private:
  bool owns_ = false;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
};

}  // namespace pipewright::distributed
