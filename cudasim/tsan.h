// ThreadSanitizer annotations the executor uses (no-ops without -fsanitize=thread); see
// Note [Races inside a block] in executor.cc.
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#define CUDASIM_TSAN_RELEASE(addr) __tsan_release(addr)
#define CUDASIM_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define CUDASIM_TSAN_IGNORE_BEGIN() __tsan_ignore_thread_begin()
#define CUDASIM_TSAN_IGNORE_END() __tsan_ignore_thread_end()
#else
#define CUDASIM_TSAN_RELEASE(addr) (void)(addr)
#define CUDASIM_TSAN_ACQUIRE(addr) (void)(addr)
#define CUDASIM_TSAN_IGNORE_BEGIN() (void)0
#define CUDASIM_TSAN_IGNORE_END() (void)0
#endif
