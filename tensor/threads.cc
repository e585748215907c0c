// Intra-op threads. With OpenMP the setting is the calling thread's nthreads ICV, which every
// `#pragma omp parallel` in the CPU kernels and Eigen's GEMM read (Eigen::setNbThreads is never
// called: it is process-wide). Without OpenMP (the tsan build) kernels run on one thread and
// the setting is only remembered per thread.
#include "tensor/threads.h"

#include <algorithm>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pipewright {

#ifndef _OPENMP
namespace {
thread_local int tls_intra_op_threads = 0;  // 0: not set, use hardware_threads()
}
#endif

int hardware_threads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int intra_op_threads() {
#ifdef _OPENMP
  return std::min(omp_get_max_threads(), hardware_threads());
#else
  return tls_intra_op_threads > 0 ? tls_intra_op_threads : hardware_threads();
#endif
}

void set_intra_op_threads(int n) {
  n = std::clamp(n, 1, hardware_threads());
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  tls_intra_op_threads = n;
#endif
}

ThreadBudgetGuard::ThreadBudgetGuard(int n) : previous_(intra_op_threads()) {
  set_intra_op_threads(n);
}

ThreadBudgetGuard::~ThreadBudgetGuard() { set_intra_op_threads(previous_); }

}  // namespace pipewright
