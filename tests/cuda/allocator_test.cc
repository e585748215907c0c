// The CUDA caching allocator: size classes, exact counters (allocated, peak, reserved),
// reuse on the same stream, stream-aware reuse across streams (Note [Stream-aware reuse] in
// cuda_kernels/caching_allocator.h), empty_cache, and the out-of-memory error.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "cuda_kernels/caching_allocator.h"
#include "cuda_kernels/check.h"
#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"

namespace pipewright::testing {
namespace {

using cuda::CachingAllocator;

TEST_CASE("size classes: 512 B steps up to 1 MiB, then 2 MiB steps", "[cuda][allocator]") {
  // Pure arithmetic: runs without a GPU.
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(1 << 20) == 1 << 20);
  CHECK(CachingAllocator::round_size((1 << 20) + 1) == 2 << 20);
  CHECK(CachingAllocator::round_size(5 << 20) == 6 << 20);
}

/// The registered allocator of cuda:0, as the caching allocator it is.
CachingAllocator& cuda0_allocator() {
  auto* a = dynamic_cast<CachingAllocator*>(&allocator_for(gpu()));
  REQUIRE(a != nullptr);
  return *a;
}

TEST_CASE("counters are exact; a freed block is reused on its stream at once",
          "[cuda][allocator]") {
  if (!gpu_available_or_skip()) return;
  CachingAllocator& a = cuda0_allocator();
  a.empty_cache();
  const int64_t base = a.allocated(), base_reserved = a.reserved();
  a.reset_peak();
  const Stream stream = Stream::create(gpu());

  void* p = a.allocate(1000, stream.handle());
  CHECK(a.allocated() == base + 1000);               // requested bytes, not rounded
  CHECK(a.reserved() == base_reserved + 1024);       // rounded to the size class
  void* q = a.allocate(3 << 20, stream.handle());
  CHECK(a.allocated() == base + 1000 + (3 << 20));
  CHECK(a.peak() == base + 1000 + (3 << 20));
  CHECK(a.reserved() == base_reserved + 1024 + (4 << 20));
  a.deallocate(q, 3 << 20);
  a.deallocate(p, 1000);
  CHECK(a.allocated() == base);
  CHECK(a.peak() == base + 1000 + (3 << 20));        // the peak stays
  CHECK(a.reserved() == base_reserved + 1024 + (4 << 20));  // cached, not freed
  CHECK(a.cached_blocks() == 2);

  const int64_t mallocs = a.device_mallocs();
  void* again = a.allocate(900, stream.handle());    // same size class, same stream
  CHECK(again == p);
  CHECK(a.device_mallocs() == mallocs);
  a.deallocate(again, 900);

  a.empty_cache();
  CHECK(a.cached_blocks() == 0);
  CHECK(a.reserved() == base_reserved);
  CHECK(a.allocate(0, stream.handle()) == nullptr);
  CHECK(a.allocated() == base);
}

/// Blocks `stream` until `release` becomes true (a host function queued on the stream).
void CUDART_CB hold_stream(void* release) {
  auto* flag = static_cast<std::atomic<bool>*>(release);
  while (!flag->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST_CASE("a block freed on a busy stream is not reused by another stream until it is done",
          "[cuda][allocator]") {
  if (!gpu_available_or_skip()) return;
  CachingAllocator& a = cuda0_allocator();
  a.empty_cache();
  const Stream busy = Stream::create(gpu()), other = Stream::create(gpu());
  std::atomic<bool> release{false};
  auto* busy_stream = static_cast<cudaStream_t>(busy.handle());
  struct ReleaseOnExit {  // never leave the stream stuck, even when a check throws
    std::atomic<bool>& flag;
    cudaStream_t stream;
    ~ReleaseOnExit() {
      flag = true;
      (void)cudaStreamSynchronize(stream);  // the host function stops reading `flag`
    }
  } release_on_exit{release, busy_stream};

  void* p = a.allocate(4096, busy.handle());
  PW_CUDA_CHECK(cudaLaunchHostFunc(busy_stream, hold_stream, &release));  // busy is now stuck
  a.deallocate(p, 4096);  // its free-time event is queued behind the stuck work

  void* q = a.allocate(4096, other.handle());
  CHECK(q != p);  // the other stream must not get memory the busy stream may still use
  void* r = a.allocate(4096, busy.handle());
  CHECK(r == p);  // the busy stream itself may: its own work is ordered
  a.deallocate(r, 4096);

  release = true;
  busy.synchronize();  // now the free-time event has completed
  const int64_t mallocs = a.device_mallocs();
  void* s = a.allocate(4096, other.handle());
  CHECK(s == p);  // safe for any stream now, and found in the cache
  CHECK(a.device_mallocs() == mallocs);
  a.deallocate(q, 4096);
  a.deallocate(s, 4096);
  a.empty_cache();
}

TEST_CASE("record_stream: a block used on another stream waits for it, even on its own stream",
          "[cuda][allocator]") {
  // Note [Streams that use a block]: the block belongs to `own`, a copy stream reads it;
  // after the free, neither `own` nor a third stream may get it before the copy stream is done.
  if (!gpu_available_or_skip()) return;
  CachingAllocator& a = cuda0_allocator();
  a.empty_cache();
  const Stream own = Stream::create(gpu()), user = Stream::create(gpu()),
               third = Stream::create(gpu());
  std::atomic<bool> release{false};
  auto* user_stream = static_cast<cudaStream_t>(user.handle());
  struct ReleaseOnExit {
    std::atomic<bool>& flag;
    cudaStream_t stream;
    ~ReleaseOnExit() {
      flag = true;
      (void)cudaStreamSynchronize(stream);
    }
  } release_on_exit{release, user_stream};

  void* p = a.allocate(4096, own.handle());
  PW_CUDA_CHECK(cudaLaunchHostFunc(user_stream, hold_stream, &release));  // `user` is stuck
  a.record_stream(p, 0, user_stream);
  a.record_stream(p, 0, user_stream);                                        // repeats: ignored
  a.record_stream(p, 0, static_cast<cudaStream_t>(own.handle()));            // own: ignored
  a.deallocate(p, 4096);
  own.synchronize();  // the free-time event on `own` is done; the use on `user` is not

  void* q = a.allocate(4096, own.handle());
  CHECK(q != p);  // not even the allocation stream may reuse it while `user` may still read
  void* r = a.allocate(4096, third.handle());
  CHECK(r != p);

  release = true;
  user.synchronize();
  const int64_t mallocs = a.device_mallocs();
  void* s = a.allocate(4096, third.handle());
  CHECK(s == p);  // every use is done: any stream may have it, from the cache
  CHECK(a.device_mallocs() == mallocs);
  a.deallocate(q, 4096);
  a.deallocate(r, 4096);
  a.deallocate(s, 4096);
  a.record_stream(s, 0, user_stream);  // no longer live: ignored, no crash
  a.empty_cache();
  CHECK(a.cached_blocks() == 0);
}

TEST_CASE("record_stream through a tensor: Tensor storage and the backend reach the allocator",
          "[cuda][allocator]") {
  if (!gpu_available_or_skip()) return;
  CachingAllocator& a = cuda0_allocator();
  a.empty_cache();
  const Stream own = Stream::create(gpu()), user = Stream::create(gpu());
  std::atomic<bool> release{false};
  auto* user_stream = static_cast<cudaStream_t>(user.handle());
  struct ReleaseOnExit {
    std::atomic<bool>& flag;
    cudaStream_t stream;
    ~ReleaseOnExit() {
      flag = true;
      (void)cudaStreamSynchronize(stream);
    }
  } release_on_exit{release, user_stream};
  void* block = nullptr;
  {
    StreamGuard on_own(own);
    Tensor t = Tensor::zeros({256}, {.device = gpu()});  // 1 KiB, allocated for `own`
    block = t.storage()->data();
    PW_CUDA_CHECK(cudaLaunchHostFunc(user_stream, hold_stream, &release));
    record_stream(t.slice(10, 20), user);  // a view: the whole block is recorded
  }  // t freed here
  own.synchronize();
  void* q = a.allocate(1024, own.handle());
  CHECK(q != block);
  release = true;
  user.synchronize();
  void* r = a.allocate(1024, own.handle());
  CHECK(r == block);
  a.deallocate(q, 1024);
  a.deallocate(r, 1024);
  a.empty_cache();
}

TEST_CASE("out of memory throws CudaError naming the size", "[cuda][allocator]") {
  if (!gpu_available_or_skip()) return;
  CachingAllocator& a = cuda0_allocator();
  const size_t huge = size_t{1} << 50;  // 1 PiB
  const int64_t before = a.allocated();
  try {
    a.allocate(huge, nullptr);
    FAIL("allocating 1 PiB succeeded");
  } catch (const cuda::CudaError& e) {
    CHECK(std::string(e.what()).find(std::to_string(CachingAllocator::round_size(huge))) !=
          std::string::npos);
    CHECK(e.code() == static_cast<int>(cudaErrorMemoryAllocation));
  }
  CHECK(a.allocated() == before);
  // The device is still usable.
  void* p = a.allocate(100, nullptr);
  CHECK(p != nullptr);
  a.deallocate(p, 100);
}

TEST_CASE("direct mode: every allocation is its own cudaMalloc of exactly its size, freed at once",
          "[cuda][allocator]") {
  if (!gpu_available_or_skip()) return;
  // Read when an allocator is made (Note [Direct mode]); this one is the test's own.
  setenv("PIPEWRIGHT_CUDA_ALLOCATOR", "direct", 1);
  CachingAllocator a(gpu());
  unsetenv("PIPEWRIGHT_CUDA_ALLOCATOR");
  REQUIRE(a.direct());
  void* p = a.allocate(1000, nullptr);
  CHECK(a.reserved() == 1000);  // not rounded to 1,024
  CHECK(a.allocated() == 1000);
  a.deallocate(p, 1000);
  CHECK(a.reserved() == 0);  // back to the driver, not cached
  CHECK(a.cached_blocks() == 0);
  void* q = a.allocate(1000, nullptr);
  CHECK(a.device_mallocs() == 2);  // a new cudaMalloc, no reuse
  a.deallocate(q, 1000);
  CHECK(a.reserved() == 0);
  CHECK(a.peak() == 1000);
  CHECK_FALSE(CachingAllocator(gpu()).direct());  // the default: caching
}

}  // namespace
}  // namespace pipewright::testing

namespace pipewright::testing {
namespace {

// Note [Graph pools]: allocations of a capturing stream come from the pool, without a query or
// an event; a block of the capture freed on its own stream serves that stream again at once;
// one freed with another stream's use, or allocated before the capture, waits for the
// capture's end; pool blocks never go back to the cache while the pool lives; release hands
// the free ones back to the driver.
TEST_CASE("graph pools: what a capture allocates stays the graph's", "[cuda][allocator][graph]") {
  if (!gpu_available_or_skip()) return;
  CachingAllocator& a = cuda0_allocator();
  const Stream s = Stream::create(gpu()), other = Stream::create(gpu());
  cudaStream_t cs = static_cast<cudaStream_t>(s.handle());
  constexpr int64_t kPool = 9001;
  void* before = a.allocate(4096, s.handle());  // an ordinary block, freed during the capture
  const int64_t cached = a.cached_blocks();

  a.begin_graph_pool(kPool);
  CHECK_THROWS_AS(a.begin_graph_pool(kPool + 1), std::logic_error);  // one capture per GPU
  REQUIRE(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = a.allocate(4096, s.handle());  // a new block (cudaMalloc in relaxed mode)
  CHECK(a.graph_pool_bytes(kPool) == 4096);
  a.deallocate(p, 4096);
  CHECK(a.allocate(4096, s.handle()) == p);  // its own stream, at once
  a.record_stream(p, 0, static_cast<cudaStream_t>(other.handle()));
  a.deallocate(p, 4096);                     // used by another stream: pending
  void* q = a.allocate(4096, s.handle());
  CHECK(q != p);
  a.deallocate(before, 4096);                // allocated before the capture: joins the pool
  CHECK(a.cached_blocks() == cached);        // nothing went to the cache
  void* r = a.allocate(4096, s.handle());
  CHECK(r != before);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(cs, &graph) == cudaSuccess);  // nothing refused
  a.end_graph_pool();
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(a.graph_pool_bytes(kPool) == 4 * 4096);  // p, q, r and `before`

  // Between captures, a pool block freed by its tensor goes back to the pool, not the cache.
  a.deallocate(q, 4096);
  CHECK(a.cached_blocks() == cached);
  // The next capture of the pool may take any of its free blocks, on any stream.
  a.begin_graph_pool(kPool);
  cudaStream_t co = static_cast<cudaStream_t>(other.handle());
  REQUIRE(cudaStreamBeginCapture(co, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* reused = a.allocate(4096, other.handle());
  CHECK((reused == p || reused == q || reused == before));
  const int64_t mallocs = a.device_mallocs();
  REQUIRE(cudaStreamEndCapture(co, &graph) == cudaSuccess);
  a.end_graph_pool();
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(a.device_mallocs() == mallocs);

  // Release: free blocks to the driver, live ones (r, reused) become ordinary blocks.
  const int64_t reserved = a.reserved();
  a.release_graph_pool(kPool);
  CHECK(a.graph_pool_bytes(kPool) == 0);
  CHECK(a.reserved() == reserved - 2 * 4096);
  a.deallocate(r, 4096);
  a.deallocate(reused, 4096);
  CHECK(a.cached_blocks() == cached + 2);  // the cache's now
}

}  // namespace
}  // namespace pipewright::testing
