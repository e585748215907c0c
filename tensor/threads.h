// Intra-op threads of CPU devices.
//
// Policy (documented in docs/architecture.md): the machine has hardware_threads() cores.
// A thread running CPU kernels uses intra_op_threads() threads for large kernels (Eigen's
// GEMM through OpenMP, elementwise loops). By default that is all cores. When several CPU
// devices compute at once (pipeline stages, one worker thread each), the pipeline gives each
// worker max(1, cores / active_workers) threads with ThreadBudgetGuard, so the total never
// oversubscribes the cores. The setting is per calling thread (OpenMP's nthreads ICV).
#pragma once

namespace pipewright {

/// Cores available to this process (std::thread::hardware_concurrency, at least 1).
int hardware_threads();
/// Threads the calling thread's CPU kernels may use.
int intra_op_threads();
/// Sets the calling thread's intra-op threads (clamped to [1, hardware_threads()]).
void set_intra_op_threads(int n);

/// Sets the calling thread's intra-op threads for its lifetime, then restores them.
class ThreadBudgetGuard {
 public:
  explicit ThreadBudgetGuard(int n);
  ~ThreadBudgetGuard();
  ThreadBudgetGuard(const ThreadBudgetGuard&) = delete;
  ThreadBudgetGuard& operator=(const ThreadBudgetGuard&) = delete;

 private:
  int previous_;
};

}  // namespace pipewright
