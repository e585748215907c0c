#include "distributed/mpi.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace pipewright::distributed {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw MpiError(std::string(what) + ": " + std::string(text, static_cast<size_t>(length)));
}

NodeRanks node_ranks(MPI_Comm comm, int rank) {
  MPI_Comm node;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  NodeRanks out;
  const int rank_rc = MPI_Comm_rank(node, &out.rank);
  const int size_rc = MPI_Comm_size(node, &out.size);
  MPI_Comm_free(&node);
  check(rank_rc, "MPI_Comm_rank (node)");
  check(size_rc, "MPI_Comm_size (node)");
  return out;
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

double timeout_seconds() {
  const char* text = std::getenv("PIPEWRIGHT_MPI_TIMEOUT");
  if (text == nullptr || *text == '\0') return 300.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds > 0)) {
    throw std::invalid_argument(
        "PIPEWRIGHT_MPI_TIMEOUT must be a positive number of seconds, "
        "got \"" +
        std::string(text) + "\"");
  }
  return seconds;
}

void wait(MPI_Request& request, const std::string& what, const std::function<void()>& interrupted) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds()));
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what.c_str());
    if (done) return;
    if (interrupted) interrupted();
    if (Clock::now() > deadline) {
      throw MpiTimeout(what + ": no answer within " + std::to_string(timeout_seconds()) +
                       " s (PIPEWRIGHT_MPI_TIMEOUT)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  int provided = 0;
  if (!initialized) {
    check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    owns_ = true;
  } else {
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw MpiError("MPI provides thread level " + std::to_string(provided) +
                   ", pipewright needs MPI_THREAD_MULTIPLE (" +
                   std::to_string(MPI_THREAD_MULTIPLE) + ")");
  }
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  local_rank_ = node_ranks(MPI_COMM_WORLD, rank_).rank;
}

MpiSession::~MpiSession() {
  if (owns_) MPI_Finalize();
}

void MpiSession::abort(int status) const {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

}  // namespace pipewright::distributed
