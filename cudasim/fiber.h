// Fibers: the CUDA threads of one simulated block, each on a stack of its own, switched by hand.
//
// A kernel thread that calls __syncthreads() or a warp shuffle must stop there until its
// block (or warp) catches up, then continue where it was. So every CUDA thread runs on a Fiber:
// a small stack plus the saved registers of a suspended function. The block scheduler
// (executor.cc) switches into a fiber with resume(); the thread switches back with suspend()
// when it waits, and finishes by returning from its body.
//
//   scheduler stack                fiber stack (one per waiting CUDA thread)
//   ───────────────                ─────────────────────────────────────────
//   resume(f)  ──── switch ──────> body(): ... __syncthreads()
//                                                └ suspend()
//              <─── switch ──────────────────────┘
//   (all threads at the barrier: release them)
//   resume(f)  ──── switch ──────>              ... continues after the barrier
//
// The switch is 20 instructions of assembly (callee-saved registers, the stack pointer, the
// SSE and x87 control words: what the x86-64 System V ABI says survives a call), not
// swapcontext(), which makes a system call per switch to save the signal mask: a grid of
// 65,536 blocks of 256 threads is 16 M thread starts, and that syscall would be most of the
// time. Sanitizers are told about every switch (AddressSanitizer's start/finish_switch_fiber,
// ThreadSanitizer's fibers), so a kernel's own out-of-bounds access is still an ASan report
// and the block's threads are separate threads to TSan (see Note [Races inside a block] in
// executor.cc).
//
// x86-64 only (so is the project's build).
#pragma once

#include <cstddef>

namespace cudasim {

class Fiber {
 public:
  /// A fiber with a `stack_bytes` stack (mmap'ed, with an inaccessible guard page below it, so
  /// a stack overflow is a segmentation fault at once, not silent corruption). Throws
  /// std::runtime_error when the stack cannot be mapped.
  explicit Fiber(size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  /// Prepares the fiber to run `body(arg)` from the top of its stack at the next resume().
  /// `body` must not return normally: it ends with finish(). Under ThreadSanitizer, body
  /// starts with TSan ignoring its memory accesses (the fiber's bookkeeping) and finish()
  /// must be reached with them ignored too; in between, body decides what TSan sees.
  void start(void (*body)(void* arg), void* arg);

  /// Switches from the calling (scheduler) stack into the fiber until it suspends or finishes.
  void resume();

  /// Called on the fiber: switches back to the scheduler that resumed it.
  void suspend();

  /// Called on the fiber as its last act: switches back for good (the fiber may be start()ed
  /// again later).
  [[noreturn]] void finish();

 private:
  void switch_in();
  void switch_out(bool finishing);

  void* stack_ = nullptr;        // the mapping, guard page included
  size_t mapped_bytes_ = 0;
  void* stack_bottom_ = nullptr; // lowest usable address
  size_t stack_bytes_ = 0;
  void* fiber_sp_ = nullptr;     // saved stack pointer of the fiber while it is switched out
  void* caller_sp_ = nullptr;    // saved stack pointer of the scheduler while the fiber runs
  void (*body_)(void*) = nullptr;
  void* arg_ = nullptr;
  // Sanitizer bookkeeping.
  static constexpr int kTsanRuns = 1024;  // runs per TSan fiber (see start())
  void* tsan_fiber_ = nullptr;
  void* tsan_caller_ = nullptr;
  int tsan_runs_ = 0;
  bool tsan_fresh_ = false;
  void* asan_fake_stack_ = nullptr;
  const void* caller_stack_bottom_ = nullptr;
  size_t caller_stack_bytes_ = 0;

  static void entry();
};

}  // namespace cudasim
