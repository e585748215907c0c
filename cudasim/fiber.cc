// Fiber: see fiber.h.
#include "cudasim/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CUDASIM_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define CUDASIM_TSAN 1
#endif
#include "cudasim/tsan.h"

// cudasim_switch_stack(save, next): pushes the callee-saved registers and the SSE/x87 control
// words on the current stack, stores the stack pointer in *save, loads `next` as the stack
// pointer and pops the same frame from it, then returns into whatever that stack was doing.
extern "C" void cudasim_switch_stack(void** save, void* next);
asm(R"(
  .text
  .globl cudasim_switch_stack
  .type cudasim_switch_stack, @function
cudasim_switch_stack:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size cudasim_switch_stack, .-cudasim_switch_stack
)");

namespace cudasim {
namespace {

thread_local Fiber* t_starting = nullptr;  // the fiber whose entry() is about to run

}  // namespace

Fiber::Fiber(size_t stack_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  mapped_bytes_ = stack_bytes_ + page;
  stack_ = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack_ == MAP_FAILED) {
    stack_ = nullptr;
    throw std::runtime_error("cudasim: cannot map a " + std::to_string(mapped_bytes_) +
                             "-byte fiber stack: " + std::strerror(errno));
  }
  mprotect(stack_, page, PROT_NONE);  // the guard page
  stack_bottom_ = static_cast<char*>(stack_) + page;
#if CUDASIM_TSAN
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
#if CUDASIM_TSAN
  if (tsan_fiber_ != nullptr) __tsan_destroy_fiber(tsan_fiber_);
#endif
  if (stack_ != nullptr) munmap(stack_, mapped_bytes_);
}

void Fiber::start(void (*body)(void*), void* arg) {
  body_ = body;
  arg_ = arg;
#if CUDASIM_TSAN
  // A run never returns from entry() (it switches away in finish()), so TSan's shadow call
  // stack of this fiber keeps every run's frames; past 65,536 frames TSan aborts. So every
  // kTsanRuns runs the TSan fiber is replaced, the new one ordered after the old one's last
  // act (the release in switch_out), whose stack memory it reuses. Only then: runs on one TSan
  // fiber are one thread to TSan anyway, and ordering every run after the previous one would
  // only hide more.
  if (++tsan_runs_ % kTsanRuns == 0) {
    __tsan_destroy_fiber(tsan_fiber_);
    tsan_fiber_ = __tsan_create_fiber(0);
    tsan_fresh_ = true;
  }
#endif
#if CUDASIM_ASAN
  // A fiber abandoned mid-block (its kernel faulted) may have left poisoned stack frames.
  __asan_unpoison_memory_region(stack_bottom_, stack_bytes_);
#endif
  // The initial frame, popped by cudasim_switch_stack's epilogue (lowest address first):
  //   control words | r15 r14 r13 r12 rbx rbp | return address = entry | 0 (entry's caller)
  // so the first switch "returns" into entry() with the stack aligned as after a call.
  auto top = reinterpret_cast<uintptr_t>(stack_bottom_) + stack_bytes_;
  top &= ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top) - 9;
  const uint32_t mxcsr = 0x1F80;  // all exceptions masked, round to nearest
  const uint16_t fcw = 0x037F;    // x87 default
  std::memset(frame, 0, 9 * sizeof(uint64_t));
  std::memcpy(reinterpret_cast<char*>(frame), &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(frame) + 4, &fcw, 2);
  frame[7] = reinterpret_cast<uint64_t>(&Fiber::entry);
  frame[8] = 0;
  fiber_sp_ = frame;
}

void Fiber::entry() {
  CUDASIM_TSAN_IGNORE_BEGIN();  // the fiber's own bookkeeping; its body ends the ignoring
  Fiber* self = t_starting;
#if CUDASIM_TSAN
  if (self->tsan_fresh_) {
    __tsan_acquire(self);  // after the replaced TSan fiber's last act on this stack
    self->tsan_fresh_ = false;
  }
#endif
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->caller_stack_bottom_,
                                  &self->caller_stack_bytes_);
#endif
  self->body_(self->arg_);  // ends with finish(); never returns here
  __builtin_trap();
}

void Fiber::switch_in() {
#if CUDASIM_TSAN
  tsan_caller_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
#if CUDASIM_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack_bottom_, stack_bytes_);
#endif
  cudasim_switch_stack(&caller_sp_, fiber_sp_);
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void Fiber::resume() {
  t_starting = this;
  switch_in();
}

void Fiber::switch_out(bool finishing) {
#if CUDASIM_TSAN
  void* caller = tsan_caller_;
  if (finishing) {
    __tsan_release(this);        // what a replacement TSan fiber acquires (see start())
    CUDASIM_TSAN_IGNORE_END();  // balances entry()'s, after the last field read
  }
  __tsan_switch_to_fiber(caller, __tsan_switch_to_fiber_no_sync);
#endif
#if CUDASIM_ASAN
  // Leaving for good: nullptr tells ASan to drop this stack's fake frames.
  __sanitizer_start_switch_fiber(finishing ? nullptr : &asan_fake_stack_, caller_stack_bottom_,
                                 caller_stack_bytes_);
#endif
  cudasim_switch_stack(&fiber_sp_, caller_sp_);
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(asan_fake_stack_, &caller_stack_bottom_, &caller_stack_bytes_);
#endif
  (void)finishing;
}

void Fiber::suspend() { switch_out(false); }

void Fiber::finish() {
  switch_out(true);
  __builtin_trap();  // a finished fiber is never resumed before start()
}

}  // namespace cudasim
