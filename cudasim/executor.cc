// The block scheduler: see executor.h.
//
// Note [Races inside a block]
// Under ThreadSanitizer (--config=cudasim --config=tsan) every CUDA thread's fiber is a
// separate TSan fiber, and switching between them implies no ordering
// (__tsan_switch_to_fiber_no_sync). Ordering comes only from what orders threads on a GPU:
// a barrier (each arriving thread releases the block's barrier token, each released thread
// acquires it), a shuffle (the same with its warp's token), and the start and end of a block
// (the scheduler releases a start token every thread acquires; every thread releases an end
// token the scheduler acquires, so the next kernel on the stream is ordered after this one).
// So two threads of a block touching the same shared or global memory in one barrier interval,
// one of them writing, is a TSan data race report, although the fibers run one at a time.
// Blocks of a grid are ordered one after another in that picture (a race between blocks is
// not reported), and so are threads that run start to finish one after another: they reuse
// one fiber, which TSan sees as one thread. What is checked is the threads alive at once,
// each waiting at a barrier or shuffle on a fiber of its own: the block reductions. The executor's own bookkeeping (thread states, fibers), which the scheduler
// and the fibers share with no such ordering, is hidden from TSan (CUDASIM_TSAN_IGNORE_*):
// only what the kernel body touches is checked.
#include "cudasim/executor.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cudasim/fiber.h"
#include "cudasim/sim_internal.h"

#include "cudasim/tsan.h"

namespace cudasim {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kStackBytes = 512 * 1024;  // instrumented frames are larger
#else
constexpr size_t kStackBytes = 128 * 1024;
#endif

enum class State { kNotStarted, kRunnable, kRunning, kAtBarrier, kAtShuffle, kDone };

struct CudaThread {
  uint3 idx{};
  int linear = 0;
  State state = State::kNotStarted;
  Fiber* fiber = nullptr;
  std::exception_ptr error;
  // What it waits at.
  std::source_location site;
  ShuffleKind kind = ShuffleKind::kIdx;
  unsigned mask = 0;
  uint64_t value = 0;
  int lane_arg = 0;
  int width = 32;
  uint64_t result = 0;
};

/// The running block of this OS thread (a stream's worker), and the fibers it keeps.
struct BlockRun {
  const KernelInfo* kernel = nullptr;
  dim3 grid, block;
  uint3 block_idx{};
  void (*body)(const void*) = nullptr;
  const void* arg = nullptr;
  std::vector<CudaThread> threads;
  CudaThread* current = nullptr;
  std::vector<std::unique_ptr<Fiber>> fibers;  // every fiber made on this OS thread
  std::vector<Fiber*> idle;                    // those not running a thread
  bool aborting = false;  // a thread faulted: the others unwind (see abandon_waiting)
  // Note [Races inside a block]: addresses TSan synchronises on.
  char start_token = 0, end_token = 0, barrier_token = 0;
  std::vector<char> warp_tokens;
};

thread_local BlockRun* t_run = nullptr;

/// Thrown into a waiting thread when its block is abandoned after a fault, so its stack
/// unwinds and its fiber ends cleanly (not a std::exception: kernel code does not catch it).
struct AbandonedThread {};

std::string str(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

BlockRun& run() {
  if (t_run == nullptr || t_run->current == nullptr) {
    throw KernelFault("cudasim: a device builtin (threadIdx, __syncthreads, a shuffle) was used "
                      "outside a kernel");
  }
  return *t_run;
}

[[noreturn]] void fault(const BlockRun& r, const CudaThread* t, const std::string& what) {
  std::string msg = "cudasim: kernel " + r.kernel->where() + ", block " + str(r.block_idx);
  if (t != nullptr) msg += ", thread " + str(t->idx);
  throw KernelFault(msg + ": " + what);
}

const char* kind_name(ShuffleKind k) {
  switch (k) {
    case ShuffleKind::kIdx: return "__shfl_sync";
    case ShuffleKind::kUp: return "__shfl_up_sync";
    case ShuffleKind::kDown: return "__shfl_down_sync";
    case ShuffleKind::kXor: return "__shfl_xor_sync";
    case ShuffleKind::kSyncWarp: return "__syncwarp";
  }
  return "?";
}

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

std::string where(const std::source_location& s) {
  return std::string(s.file_name()) + ":" + std::to_string(s.line()) + ":" +
         std::to_string(s.column());
}

std::string hex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Entered with TSan ignoring accesses (Fiber::entry); only the body is checked.
void thread_main(void* p) {
  auto* t = static_cast<CudaThread*>(p);
  BlockRun& r = *t_run;
  void (*body)(const void*) = r.body;
  const void* arg = r.arg;
  CUDASIM_TSAN_ACQUIRE(&r.start_token);
  CUDASIM_TSAN_IGNORE_END();
  std::exception_ptr error;
  try {
    body(arg);
  } catch (const AbandonedThread&) {
  } catch (...) {
    error = std::current_exception();
  }
  CUDASIM_TSAN_IGNORE_BEGIN();
  t->error = std::move(error);
  CUDASIM_TSAN_RELEASE(&r.end_token);
  t->state = State::kDone;
  t->fiber->finish();
}

/// Suspends the calling CUDA thread in `state` until the scheduler makes it runnable again.
void wait_as(State state) {
  BlockRun& r = *t_run;
  CudaThread* t = r.current;
  t->state = state;
  t->fiber->suspend();
  // Resumed by the scheduler: t_run->current is this thread again.
  if (r.aborting) {
    CUDASIM_TSAN_IGNORE_END();  // the caller's (syncthreads or shuffle), which it won't reach
    throw AbandonedThread{};
  }
}

/// After a fault: every thread still inside the kernel unwinds and ends (never throws).
void abandon_waiting(BlockRun& r) {
  r.aborting = true;
  for (CudaThread& t : r.threads) {
    if (t.fiber == nullptr) continue;
    r.current = &t;
    t.fiber->resume();  // throws AbandonedThread at its wait, which thread_main catches
    r.idle.push_back(t.fiber);
    t.fiber = nullptr;
  }
  r.current = nullptr;
  r.aborting = false;
  CUDASIM_TSAN_ACQUIRE(&r.end_token);
}

/// Source lane of `lane` for a shuffle, or -1 for "its own value".
int source_lane(const CudaThread& t, int lane) {
  const int w = t.width, base = lane & ~(w - 1);
  switch (t.kind) {
    case ShuffleKind::kIdx: return base + ((t.lane_arg % w) + w) % w;
    case ShuffleKind::kUp: return lane - t.lane_arg >= base ? lane - t.lane_arg : -1;
    case ShuffleKind::kDown: return lane + t.lane_arg < base + w ? lane + t.lane_arg : -1;
    case ShuffleKind::kXor: {
      const int src = lane ^ t.lane_arg;
      return src < base + w ? src : -1;
    }
    case ShuffleKind::kSyncWarp: return -1;
  }
  return -1;
}

/// Releases the warp collectives whose lanes have all arrived. Returns true if any did.
bool resolve_shuffles(BlockRun& r) {
  const int n = static_cast<int>(r.threads.size());
  bool released = false;
  for (int w = 0; w * 32 < n; ++w) {
    const int lanes = std::min(32, n - 32 * w);
    bool any = false, ready = true;
    for (int l = 0; l < lanes && ready; ++l) {
      CudaThread& t = r.threads[32 * w + l];
      if (t.state != State::kAtShuffle) continue;
      any = true;
      if (!(t.mask >> l & 1u)) {
        fault(r, &t, std::string(kind_name(t.kind)) + " with mask " + hex(t.mask) +
                         " that does not name the calling lane " + std::to_string(l));
      }
      for (int m = 0; m < 32; ++m) {
        if (!(t.mask >> m & 1u)) continue;
        if (m >= lanes) {
          fault(r, &t, std::string(kind_name(t.kind)) + " mask " + hex(t.mask) + " names lane " +
                           std::to_string(m) + " of warp " + std::to_string(w) +
                           ", which does not exist: blockDim " + str(r.block) + " has " +
                           std::to_string(n) + " threads, not a multiple of 32");
        }
        const CudaThread& o = r.threads[32 * w + m];
        if (o.state != State::kAtShuffle || !same_site(o.site, t.site) || o.kind != t.kind ||
            o.mask != t.mask) {
          fault(r, &t, std::string(kind_name(t.kind)) + " mask " + hex(t.mask) + " names lane " +
                           std::to_string(m) + ", which " +
                           (o.state == State::kDone ? std::string("has exited")
                            : o.state == State::kAtBarrier
                                ? std::string("waits at __syncthreads")
                                : std::string("waits at a different warp collective")) +
                           " (divergent warp collective)");
        }
      }
      if (t.width < 1 || t.width > 32 || (t.width & (t.width - 1)) != 0) {
        fault(r, &t, std::string(kind_name(t.kind)) + " width " + std::to_string(t.width) +
                         " is not a power of two in [1, 32]");
      }
    }
    if (!any) continue;
    for (int l = 0; l < lanes; ++l) {
      CudaThread& t = r.threads[32 * w + l];
      if (t.state != State::kAtShuffle) continue;
      const int src = source_lane(t, l);
      if (src >= 0 && !(t.mask >> src & 1u)) {
        fault(r, &t, std::string(kind_name(t.kind)) + " reads lane " + std::to_string(src) +
                         ", which is not in mask " + hex(t.mask) + " (undefined on a GPU)");
      }
      t.result = src >= 0 ? r.threads[32 * w + src].value : t.value;
    }
    for (int l = 0; l < lanes; ++l) {
      CudaThread& t = r.threads[32 * w + l];
      if (t.state == State::kAtShuffle) t.state = State::kRunnable;
    }
    released = true;
  }
  return released;
}

/// Releases the block barrier if every thread waits at it; faults if it never can be.
void resolve_barrier(BlockRun& r) {
  int at_barrier = 0, done = 0, at_shuffle = 0;
  const CudaThread* first = nullptr;
  for (const CudaThread& t : r.threads) {
    if (t.state == State::kAtBarrier) {
      ++at_barrier;
      if (first == nullptr) first = &t;
    }
    done += t.state == State::kDone;
    at_shuffle += t.state == State::kAtShuffle;
  }
  const int n = static_cast<int>(r.threads.size());
  if (at_shuffle > 0) {
    fault(r, nullptr, std::to_string(at_shuffle) + " threads wait at warp collectives and " +
                          std::to_string(at_barrier) +
                          " at __syncthreads: they can never all proceed (deadlock)");
  }
  if (done > 0) {
    fault(r, first, "__syncthreads reached by " + std::to_string(at_barrier) + " of " +
                        std::to_string(n) + " threads while " + std::to_string(done) +
                        " exited without reaching it (a barrier in divergent code)");
  }
  for (const CudaThread& t : r.threads) {
    if (!same_site(t.site, first->site)) {
      fault(r, &t, "threads wait at two different __syncthreads (thread " + str(first->idx) +
                       " at " + where(first->site) + ", this thread at " + where(t.site) +
                       "): a barrier in divergent code");
    }
  }
  for (CudaThread& t : r.threads) t.state = State::kRunnable;
}

void run_block(BlockRun& r) {
  const int n = static_cast<int>(r.threads.size());
  for (int i = 0; i < n; ++i) {
    CudaThread& t = r.threads[i];
    t = CudaThread{};
    t.linear = i;
    t.idx = uint3{static_cast<unsigned>(i) % r.block.x,
                  static_cast<unsigned>(i) / r.block.x % r.block.y,
                  static_cast<unsigned>(i) / (r.block.x * r.block.y)};
  }
  CUDASIM_TSAN_RELEASE(&r.start_token);
  for (;;) {
    bool all_done = true;
    for (int i = 0; i < n; ++i) {
      CudaThread& t = r.threads[i];
      if (t.state == State::kNotStarted) {
        if (r.idle.empty()) {
          r.fibers.push_back(std::make_unique<Fiber>(kStackBytes));
          r.idle.push_back(r.fibers.back().get());
        }
        t.fiber = r.idle.back();
        r.idle.pop_back();
        t.fiber->start(&thread_main, &t);
      } else if (t.state != State::kRunnable) {
        all_done = all_done && t.state == State::kDone;
        continue;
      }
      t.state = State::kRunning;
      r.current = &t;
      t.fiber->resume();
      r.current = nullptr;
      if (t.state == State::kDone) {
        r.idle.push_back(t.fiber);
        t.fiber = nullptr;
        if (t.error) {
          CUDASIM_TSAN_ACQUIRE(&r.end_token);  // the exception object was made by the thread
          try {
            std::rethrow_exception(t.error);
          } catch (const KernelFault&) {
            throw;
          } catch (const std::exception& e) {
            fault(r, &t, std::string("the thread threw: ") + e.what());
          } catch (...) {
            fault(r, &t, "the thread threw a non-standard exception");
          }
        }
      } else {
        all_done = false;
      }
    }
    if (all_done) break;
    if (resolve_shuffles(r)) continue;
    resolve_barrier(r);
  }
  CUDASIM_TSAN_ACQUIRE(&r.end_token);
}

}  // namespace

std::string KernelInfo::where() const {
  return file == nullptr ? name : name + " (" + file + ":" + std::to_string(line) + ")";
}

void run_grid(const KernelInfo& kernel, dim3 grid, dim3 block, void (*body)(const void*),
              const void* arg) {
  thread_local BlockRun r;  // its fiber pools live as long as the OS thread
  if (t_run != nullptr) throw KernelFault("cudasim: a kernel launched from inside a kernel");
  r.kernel = &kernel;
  r.grid = grid;
  r.block = block;
  r.body = body;
  r.arg = arg;
  r.threads.resize(static_cast<size_t>(block.x) * block.y * block.z);
  r.warp_tokens.assign((r.threads.size() + 31) / 32, 0);
  t_run = &r;
  CUDASIM_TSAN_IGNORE_BEGIN();  // Note [Races inside a block]: the scheduler's bookkeeping
  try {
    for (unsigned z = 0; z < grid.z; ++z) {
      for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
          r.block_idx = uint3{x, y, z};
          run_block(r);
        }
      }
    }
  } catch (...) {
    abandon_waiting(r);
    t_run = nullptr;
    CUDASIM_TSAN_IGNORE_END();
    throw;
  }
  t_run = nullptr;
  CUDASIM_TSAN_IGNORE_END();
}

const uint3& thread_idx() { return run().current->idx; }
const uint3& block_idx() { return run().block_idx; }
const dim3& block_dim() { return run().block; }
const dim3& grid_dim() { return run().grid; }

void syncthreads(std::source_location site) {
  BlockRun& r = run();
  CUDASIM_TSAN_IGNORE_BEGIN();
  r.current->site = site;
  CUDASIM_TSAN_RELEASE(&r.barrier_token);
  wait_as(State::kAtBarrier);
  CUDASIM_TSAN_ACQUIRE(&r.barrier_token);
  CUDASIM_TSAN_IGNORE_END();
}

uint64_t shuffle(ShuffleKind kind, unsigned mask, uint64_t value, int lane_arg, int width,
                 std::source_location site) {
  BlockRun& r = run();
  CUDASIM_TSAN_IGNORE_BEGIN();
  CudaThread* t = r.current;
  t->site = site;
  t->kind = kind;
  t->mask = mask;
  t->value = value;
  t->lane_arg = lane_arg;
  t->width = width;
  char* token = &r.warp_tokens[static_cast<size_t>(t->linear / 32)];
  CUDASIM_TSAN_RELEASE(token);
  wait_as(State::kAtShuffle);
  CUDASIM_TSAN_ACQUIRE(token);
  const uint64_t result = t->result;
  CUDASIM_TSAN_IGNORE_END();
  return result;
}

}  // namespace cudasim
