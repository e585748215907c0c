// Stream capture and CUDA graphs on simulated GPUs (cudasim/graphs.cc, Note [Stream capture]):
// captured work does not run; a graph replays it, in order, as often as launched, with one host
// call; forks and joins across streams, each captured stream replayed apart from the others
// (Note [A graph's lanes]); and every rule CUDA enforces while a capture runs, each
// refusal invalidating the capture so EndCapture returns no graph. Replays are race-checked.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/cudasim/test_util.h"

using namespace cudasim::testing;
using cudasim::Access;

namespace {

Access write_all(const float* p) { return {p, Access::kToEnd, true, 0}; }
Access read_all(const float* p) { return {p, Access::kToEnd, false, 1}; }

/// A "kernel" x = 2x + 1 over n floats.
cudaError_t twice_plus_one(cudaStream_t s, float* x, size_t n) {
  return fake_kernel(s, "twice_plus_one", {write_all(x)}, [x, n] {
    for (size_t i = 0; i < n; ++i) x[i] = 2 * x[i] + 1;
  });
}

/// buf's values once every stream's work is done.
std::vector<float> read(const DeviceFloats& buf) {
  REQUIRE_CUDA(cudaDeviceSynchronize());
  std::vector<float> host(buf.n);
  REQUIRE_CUDA(cudaMemcpy(host.data(), buf.p, buf.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

struct Stream {
  cudaStream_t s = nullptr;
  explicit Stream(unsigned flags = cudaStreamNonBlocking) {
    (void)cudaStreamCreateWithFlags(&s, flags);
  }
  ~Stream() { (void)cudaStreamDestroy(s); }
};

/// Ends s's capture, expecting `expected`; destroys a graph it got.
void end_capture_expecting(cudaStream_t s, cudaError_t expected) {
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s, &graph) == expected);
  if (graph != nullptr) REQUIRE_CUDA(cudaGraphDestroy(graph));
  CHECK((expected == cudaSuccess) == (graph != nullptr));
  (void)cudaGetLastError();
}

}  // namespace

TEST_CASE("a captured graph runs nothing until launched, then replays it with one call") {
  clean();
  DeviceFloats x(8);
  Stream stream;
  REQUIRE_CUDA(cudaMemsetAsync(x.p, 0, x.bytes(), stream.s));
  REQUIRE_CUDA(cudaStreamSynchronize(stream.s));

  REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status;
  REQUIRE_CUDA(cudaStreamIsCapturing(stream.s, &status));
  CHECK(status == cudaStreamCaptureStatusActive);
  REQUIRE_CUDA(twice_plus_one(stream.s, x.p, x.n));
  REQUIRE_CUDA(twice_plus_one(stream.s, x.p, x.n));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(stream.s, &graph));
  REQUIRE_CUDA(cudaStreamIsCapturing(stream.s, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  CHECK(read(x) == std::vector<float>(8, 0.0f));  // captured, not run

  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphDestroy(graph));  // the instance keeps its operations
  cudasim::reset_api_counts();
  for (int replay = 0; replay < 3; ++replay) REQUIRE_CUDA(cudaGraphLaunch(exec, stream.s));
  const auto counts = cudasim::api_counts();
  CHECK(counts.at("cudaGraphLaunch") == 3);
  CHECK(counts.count("kernel launch") == 0);  // the replayed kernels cost no host call
  // Six applications of x = 2x + 1 from 0: 2^6 - 1.
  CHECK(read(x) == std::vector<float>(8, 63.0f));
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphLaunch(exec, stream.s) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_CASE("a capture forks into a second stream by an event and must join it back") {
  clean();
  DeviceFloats a(4), b(4);
  Stream origin, side;
  cudaEvent_t fork, join;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaMemsetAsync(a.p, 0, a.bytes(), origin.s));
  REQUIRE_CUDA(cudaMemsetAsync(b.p, 0, b.bytes(), origin.s));
  REQUIRE_CUDA(cudaStreamSynchronize(origin.s));

  auto capture = [&](bool join_back) {
    REQUIRE_CUDA(cudaStreamBeginCapture(origin.s, cudaStreamCaptureModeGlobal));
    REQUIRE_CUDA(twice_plus_one(origin.s, a.p, a.n));
    REQUIRE_CUDA(cudaEventRecord(fork, origin.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(side.s, fork, 0));  // side joins the capture
    cudaStreamCaptureStatus status;
    REQUIRE_CUDA(cudaStreamIsCapturing(side.s, &status));
    CHECK(status == cudaStreamCaptureStatusActive);
    // b = a + 1 on the side stream, after the origin's kernel.
    REQUIRE_CUDA(fake_kernel(side.s, "a_plus_one", {read_all(a.p), write_all(b.p)},
                             [pa = a.p, pb = b.p] {
                               for (int i = 0; i < 4; ++i) pb[i] = pa[i] + 1;
                             }));
    if (join_back) {
      REQUIRE_CUDA(cudaEventRecord(join, side.s));
      REQUIRE_CUDA(cudaStreamWaitEvent(origin.s, join, 0));
    }
  };
  capture(/*join_back=*/false);
  end_capture_expecting(origin.s, cudaErrorStreamCaptureUnjoined);
  cudaStreamCaptureStatus status;
  REQUIRE_CUDA(cudaStreamIsCapturing(side.s, &status));
  CHECK(status == cudaStreamCaptureStatusNone);  // the failed end released both streams

  capture(/*join_back=*/true);
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(origin.s, &graph));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  CHECK(read(a) == std::vector<float>(4, 3.0f));  // 0 -> 1 -> 3
  CHECK(read(b) == std::vector<float>(4, 4.0f));  // the second replay's a + 1
  // An event recorded in the capture is a point of the graph, not of a stream.
  CHECK(cudaEventSynchronize(fork) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaEventDestroy(fork));
  REQUIRE_CUDA(cudaEventDestroy(join));
}

TEST_CASE("what CUDA refuses while a stream captures, each refusal invalidating the capture") {
  clean();
  DeviceFloats x(4);
  Stream stream;
  const std::vector<float> host(4, 1.0f);
  struct Refusal {
    const char* name;
    std::function<cudaError_t()> call;
    cudaError_t error;
  };
  const std::vector<Refusal> refusals{
      {"cudaMalloc", [] { void* p; return cudaMalloc(&p, 64); },
       cudaErrorStreamCaptureUnsupported},
      {"cudaStreamSynchronize of the capturing stream",
       [&] { return cudaStreamSynchronize(stream.s); }, cudaErrorStreamCaptureUnsupported},
      {"cudaStreamQuery of the capturing stream", [&] { return cudaStreamQuery(stream.s); },
       cudaErrorStreamCaptureUnsupported},
      {"cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); },
       cudaErrorStreamCaptureUnsupported},
      {"a synchronous cudaMemcpy",
       [&] { return cudaMemcpy(x.p, host.data(), x.bytes(), cudaMemcpyHostToDevice); },
       cudaErrorStreamCaptureUnsupported},
      {"a copy from pageable host memory",
       [&] {
         return cudaMemcpyAsync(x.p, host.data(), x.bytes(), cudaMemcpyHostToDevice, stream.s);
       },
       cudaErrorStreamCaptureUnsupported},
      {"work on the legacy stream beside a blocking capturing stream", [&] {
         return twice_plus_one(nullptr, x.p, x.n);
       },
       cudaSuccess /* the stream here is non-blocking: allowed */},
  };
  for (const Refusal& r : refusals) {
    INFO(r.name);
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    REQUIRE_CUDA(twice_plus_one(stream.s, x.p, x.n));
    CHECK(r.call() == r.error);
    (void)cudaGetLastError();
    cudaStreamCaptureStatus status;
    REQUIRE_CUDA(cudaStreamIsCapturing(stream.s, &status));
    if (r.error == cudaSuccess) {
      CHECK(status == cudaStreamCaptureStatusActive);
      end_capture_expecting(stream.s, cudaSuccess);
      REQUIRE_CUDA(cudaDeviceSynchronize());
    } else {
      CHECK(status == cudaStreamCaptureStatusInvalidated);
      // Work after the refusal is refused too, and the end returns no graph.
      CHECK(twice_plus_one(stream.s, x.p, x.n) == cudaErrorStreamCaptureInvalidated);
      (void)cudaGetLastError();
      end_capture_expecting(stream.s, cudaErrorStreamCaptureInvalidated);
    }
  }

  // A blocking stream's capture and the legacy stream: an implicit synchronisation.
  Stream blocking(cudaStreamDefault);
  REQUIRE_CUDA(cudaStreamBeginCapture(blocking.s, cudaStreamCaptureModeRelaxed));
  CHECK(twice_plus_one(nullptr, x.p, x.n) == cudaErrorStreamCaptureImplicit);
  (void)cudaGetLastError();
  end_capture_expecting(blocking.s, cudaErrorStreamCaptureInvalidated);

  // The legacy stream cannot capture; a stream cannot capture twice; only the origin ends it.
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) ==
        cudaErrorStreamCaptureUnsupported);
  REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
  CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);
  Stream other;
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(other.s, &graph) == cudaErrorIllegalState);

  // Waiting for an event recorded outside the capture breaks its isolation.
  cudaEvent_t outside;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaEventRecord(outside, other.s));
  CHECK(cudaStreamWaitEvent(stream.s, outside, 0) == cudaErrorStreamCaptureIsolation);
  (void)cudaGetLastError();
  end_capture_expecting(stream.s, cudaErrorStreamCaptureInvalidated);
  REQUIRE_CUDA(cudaEventDestroy(outside));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  clean();
}

TEST_CASE("capture modes: who may call what while a capture runs") {
  clean();
  Stream stream;
  DeviceFloats x(4);
  auto malloc_from_another_thread = [] {
    cudaError_t status = cudaSuccess;
    std::thread([&] {
      void* p = nullptr;
      status = cudaMalloc(&p, 64);
      if (status == cudaSuccess) (void)cudaFree(p);
      (void)cudaGetLastError();
    }).join();
    return status;
  };
  SECTION("global: every thread is held to the rules") {
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    CHECK(malloc_from_another_thread() == cudaErrorStreamCaptureUnsupported);
    end_capture_expecting(stream.s, cudaErrorStreamCaptureInvalidated);
  }
  SECTION("thread-local: only the capturing thread") {
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    CHECK(malloc_from_another_thread() == cudaSuccess);
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    end_capture_expecting(stream.s, cudaErrorStreamCaptureInvalidated);
  }
  SECTION("relaxed: allocation is allowed, a wait for the capturing stream still is not") {
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeRelaxed));
    void* p = nullptr;
    REQUIRE_CUDA(cudaMalloc(&p, 64));
    REQUIRE_CUDA(cudaFree(p));
    REQUIRE_CUDA(twice_plus_one(stream.s, x.p, x.n));
    end_capture_expecting(stream.s, cudaSuccess);
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaStreamSynchronize(stream.s) == cudaErrorStreamCaptureUnsupported);
    (void)cudaGetLastError();
    end_capture_expecting(stream.s, cudaErrorStreamCaptureInvalidated);
  }
  SECTION("a thread that exchanges its own mode for relaxed may allocate during a global "
          "capture, its own or another thread's (as a caching allocator does)") {
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    REQUIRE_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(mode == cudaStreamCaptureModeGlobal);  // the previous mode comes back
    void* p = nullptr;
    REQUIRE_CUDA(cudaMalloc(&p, 64));
    cudaError_t other = cudaErrorUnknown;
    void* q = nullptr;
    std::thread([&] {
      cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
      (void)cudaThreadExchangeStreamCaptureMode(&relaxed);
      other = cudaMalloc(&q, 64);
      (void)cudaGetLastError();
    }).join();
    CHECK(other == cudaSuccess);
    REQUIRE_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));  // back to global
    CHECK(mode == cudaStreamCaptureModeRelaxed);
    CHECK(cudaFree(p) == cudaErrorStreamCaptureUnsupported);  // global again: refused
    (void)cudaGetLastError();
    end_capture_expecting(stream.s, cudaErrorStreamCaptureInvalidated);
    REQUIRE_CUDA(cudaFree(p));
    REQUIRE_CUDA(cudaFree(q));
    // 3: no enumerator's, yet within the enum's range (so the cast itself is defined).
    cudaStreamCaptureMode bad = static_cast<cudaStreamCaptureMode>(3);
    CHECK(cudaThreadExchangeStreamCaptureMode(&bad) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
  }
  SECTION("a thread in thread-local mode ignores another thread's global capture") {
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    cudaError_t other = cudaErrorUnknown;
    std::thread([&] {
      cudaStreamCaptureMode local = cudaStreamCaptureModeThreadLocal;
      (void)cudaThreadExchangeStreamCaptureMode(&local);
      void* q = nullptr;
      other = cudaMalloc(&q, 64);
      if (other == cudaSuccess) (void)cudaFree(q);
      (void)cudaGetLastError();
    }).join();
    CHECK(other == cudaSuccess);
    end_capture_expecting(stream.s, cudaSuccess);
  }
  SECTION("global: the end must come from the thread that began it") {
    REQUIRE_CUDA(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal));
    cudaError_t status = cudaSuccess;
    std::thread([&] {
      cudaGraph_t graph = nullptr;
      status = cudaStreamEndCapture(stream.s, &graph);
      (void)cudaGetLastError();
    }).join();
    CHECK(status == cudaErrorStreamCaptureWrongThread);
    end_capture_expecting(stream.s, cudaSuccess);
  }
  REQUIRE_CUDA(cudaDeviceSynchronize());
}

TEST_CASE("a replayed graph is race-checked like eager work") {
  clean();
  const cudasim::RacePolicy previous = cudasim::set_race_policy(cudasim::RacePolicy::kReport);
  DeviceFloats x(4);
  Stream a, b;
  REQUIRE_CUDA(cudaStreamBeginCapture(a.s, cudaStreamCaptureModeGlobal));
  REQUIRE_CUDA(twice_plus_one(a.s, x.p, x.n));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(a.s, &graph));
  CHECK(cudasim::take_race_reports().empty());  // capturing accesses nothing
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, a.s));
  // Stream b reads x with no ordering after the replay's write: a race, named by the kernel.
  REQUIRE_CUDA(fake_kernel(b.s, "unordered_reader", {read_all(x.p)}));
  const std::vector<std::string> reports = cudasim::take_race_reports();
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].find("twice_plus_one") != std::string::npos);
  CHECK(reports[0].find("unordered_reader") != std::string::npos);
  // Ordered by an event after the replay (and the replay after that reader, by the host's
  // wait): no race.
  REQUIRE_CUDA(cudaDeviceSynchronize());
  cudaEvent_t done;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaGraphLaunch(exec, a.s));
  REQUIRE_CUDA(cudaEventRecord(done, a.s));
  REQUIRE_CUDA(cudaStreamWaitEvent(b.s, done, 0));
  REQUIRE_CUDA(fake_kernel(b.s, "ordered_reader", {read_all(x.p)}));
  CHECK(cudasim::take_race_reports().empty());
  REQUIRE_CUDA(cudaEventDestroy(done));
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  cudasim::set_race_policy(previous);
  clean();
}

// Note [A graph's lanes]: a replay runs each captured stream on a stream of its own, each op
// after what the capture's events made it follow and nothing else, so two branches the capture
// never ordered run apart — at once, if they can — and their accesses to the same bytes race.
TEST_CASE("a replay keeps a graph's edges only: branches with no edge between them race") {
  clean();
  const cudasim::RacePolicy previous = cudasim::set_race_policy(cudasim::RacePolicy::kReport);
  DeviceFloats x(4);
  Stream origin, left, right;
  std::vector<cudaEvent_t> events(4);  // fork, left -> right, left's end, right's end
  for (cudaEvent_t& e : events) REQUIRE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaMemsetAsync(x.p, 0, x.bytes(), origin.s));
  REQUIRE_CUDA(cudaStreamSynchronize(origin.s));
  // origin forks `left` (x = 2x + 1) and `right` (x = x + 10); `ordered`: right waits for left.
  auto capture = [&](bool ordered) {
    REQUIRE_CUDA(cudaStreamBeginCapture(origin.s, cudaStreamCaptureModeGlobal));
    REQUIRE_CUDA(cudaEventRecord(events[0], origin.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(left.s, events[0], 0));
    REQUIRE_CUDA(cudaStreamWaitEvent(right.s, events[0], 0));
    // Unordered, the kernels only declare their writes: run at once, they would race for
    // real, which TSan (--config=tsan) would rightly report.
    REQUIRE_CUDA(fake_kernel(left.s, "left_writer", {write_all(x.p)}, [p = x.p, ordered] {
      for (int i = 0; ordered && i < 4; ++i) p[i] = 2 * p[i] + 1;
    }));
    if (ordered) {
      REQUIRE_CUDA(cudaEventRecord(events[1], left.s));
      REQUIRE_CUDA(cudaStreamWaitEvent(right.s, events[1], 0));
    }
    REQUIRE_CUDA(fake_kernel(right.s, "right_writer", {write_all(x.p)}, [p = x.p, ordered] {
      for (int i = 0; ordered && i < 4; ++i) p[i] += 10;
    }));
    REQUIRE_CUDA(cudaEventRecord(events[2], left.s));
    REQUIRE_CUDA(cudaEventRecord(events[3], right.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(origin.s, events[2], 0));
    REQUIRE_CUDA(cudaStreamWaitEvent(origin.s, events[3], 0));
    cudaGraph_t graph = nullptr;
    REQUIRE_CUDA(cudaStreamEndCapture(origin.s, &graph));
    cudaGraphExec_t exec = nullptr;
    REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    REQUIRE_CUDA(cudaGraphDestroy(graph));
    return exec;
  };

  cudaGraphExec_t exec = capture(/*ordered=*/false);
  CHECK(cudasim::take_race_reports().empty());  // capturing accesses nothing
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  const std::vector<std::string> reports = cudasim::take_race_reports();
  REQUIRE(reports.size() == 1);  // captured one after the other, yet unordered
  CHECK(reports[0].find("left_writer") != std::string::npos);
  CHECK(reports[0].find("right_writer") != std::string::npos);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaDeviceSynchronize());

  REQUIRE_CUDA(cudaMemsetAsync(x.p, 0, x.bytes(), origin.s));
  exec = capture(/*ordered=*/true);
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  // A reader after the launch stream sees both replays whole: 0 -> 11 -> 33.
  REQUIRE_CUDA(fake_kernel(origin.s, "reader", {read_all(x.p)}));
  CHECK(cudasim::take_race_reports().empty());
  CHECK(read(x) == std::vector<float>(4, 33.0f));
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  for (cudaEvent_t e : events) REQUIRE_CUDA(cudaEventDestroy(e));
  cudasim::set_race_policy(previous);
  clean();
}

TEST_CASE("launches of one graph exec from two streams run one after the other") {
  clean();
  const cudasim::RacePolicy previous = cudasim::set_race_policy(cudasim::RacePolicy::kReport);
  DeviceFloats x(4);
  Stream a, b;
  REQUIRE_CUDA(cudaMemsetAsync(x.p, 0, x.bytes(), a.s));
  REQUIRE_CUDA(cudaStreamSynchronize(a.s));
  REQUIRE_CUDA(cudaStreamBeginCapture(a.s, cudaStreamCaptureModeGlobal));
  REQUIRE_CUDA(twice_plus_one(a.s, x.p, x.n));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(a.s, &graph));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, a.s));
  REQUIRE_CUDA(cudaGraphLaunch(exec, b.s));  // no event between: CUDA orders them all the same
  CHECK(cudasim::take_race_reports().empty());
  CHECK(read(x) == std::vector<float>(4, 3.0f));
  // The launch orders nothing else: stream a's kernel after a launch on b races with it.
  REQUIRE_CUDA(cudaGraphLaunch(exec, b.s));
  REQUIRE_CUDA(fake_kernel(a.s, "unordered_after", {read_all(x.p)}));
  CHECK(cudasim::take_race_reports().size() == 1);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  cudasim::set_race_policy(previous);
  clean();
}

TEST_CASE("a replay runs a graph's independent branches at once, as a GPU may") {
  clean();
  Stream origin, first, second;
  cudaEvent_t fork, joins[2];
  REQUIRE_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  for (cudaEvent_t& e : joins) REQUIRE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  // The first branch's kernel (captured first) waits, up to 20 s, for the second's to run: a
  // replay that ran the branches in capture order would time out.
  std::atomic<bool> second_ran{false};
  bool first_saw_it = false;
  REQUIRE_CUDA(cudaStreamBeginCapture(origin.s, cudaStreamCaptureModeGlobal));
  REQUIRE_CUDA(cudaEventRecord(fork, origin.s));
  REQUIRE_CUDA(cudaStreamWaitEvent(first.s, fork, 0));
  REQUIRE_CUDA(cudaStreamWaitEvent(second.s, fork, 0));
  REQUIRE_CUDA(fake_kernel(first.s, "waiter", {}, [&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!second_ran.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    first_saw_it = second_ran.load();
  }));
  REQUIRE_CUDA(fake_kernel(second.s, "signaller", {}, [&] { second_ran.store(true); }));
  REQUIRE_CUDA(cudaEventRecord(joins[0], first.s));
  REQUIRE_CUDA(cudaEventRecord(joins[1], second.s));
  for (cudaEvent_t e : joins) REQUIRE_CUDA(cudaStreamWaitEvent(origin.s, e, 0));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(origin.s, &graph));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_FALSE(second_ran.load());  // captured, not run
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  REQUIRE_CUDA(cudaStreamSynchronize(origin.s));  // the launch stream waits for both branches
  CHECK(second_ran.load());
  CHECK(first_saw_it);
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  REQUIRE_CUDA(cudaEventDestroy(fork));
  for (cudaEvent_t e : joins) REQUIRE_CUDA(cudaEventDestroy(e));
}

// Note [Graphs over devices]: a stream of another device joins a capture like any stream; a
// copy between the devices is captured only as cudaMemcpyAsync over peer access enabled both
// ways (CUDA refuses cudaMemcpyPeerAsync in a capture); a replay runs each op on its own
// device, after what it follows, and the launch stream waits for the last of them.
TEST_CASE("a graph over two devices replays each op on its device, in order") {
  clean();
  REQUIRE(cudasim::simulated_device_count() >= 2);
  const cudasim::RacePolicy previous = cudasim::set_race_policy(cudasim::RacePolicy::kReport);
  REQUIRE_CUDA(cudaSetDevice(0));
  DeviceFloats a(4);
  Stream origin;
  REQUIRE_CUDA(cudaSetDevice(1));
  DeviceFloats b(4);
  Stream side, reader;
  REQUIRE_CUDA(cudaSetDevice(0));
  cudaEvent_t fork, join, done;
  REQUIRE_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(cudaMemsetAsync(a.p, 0, a.bytes(), origin.s));
  REQUIRE_CUDA(cudaStreamSynchronize(origin.s));

  // The copy from a (device 0) to b (device 1) by `how`, on device 1's stream.
  enum class How { kPeer, kUnifiedAddresses };
  auto capture = [&](How how) {
    REQUIRE_CUDA(cudaStreamBeginCapture(origin.s, cudaStreamCaptureModeGlobal));
    REQUIRE_CUDA(twice_plus_one(origin.s, a.p, a.n));
    REQUIRE_CUDA(cudaEventRecord(fork, origin.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(side.s, fork, 0));  // device 1's stream joins
    const cudaError_t copied =
        how == How::kPeer ? cudaMemcpyPeerAsync(b.p, 1, a.p, 0, a.bytes(), side.s)
                          : cudaMemcpyAsync(b.p, a.p, a.bytes(), cudaMemcpyDeviceToDevice, side.s);
    (void)cudaGetLastError();
    if (copied == cudaSuccess) REQUIRE_CUDA(twice_plus_one(side.s, b.p, b.n));  // b = 2a + 1
    (void)cudaEventRecord(join, side.s);
    (void)cudaStreamWaitEvent(origin.s, join, 0);
    (void)cudaGetLastError();
    return copied;
  };
  // Refused: a peer copy; a copy by unified addresses without peer access.
  CHECK(capture(How::kPeer) == cudaErrorStreamCaptureUnsupported);
  end_capture_expecting(origin.s, cudaErrorStreamCaptureInvalidated);
  CHECK(capture(How::kUnifiedAddresses) == cudaErrorStreamCaptureUnsupported);
  end_capture_expecting(origin.s, cudaErrorStreamCaptureInvalidated);

  for (int d : {0, 1}) {
    REQUIRE_CUDA(cudaSetDevice(d));
    REQUIRE_CUDA(cudaDeviceEnablePeerAccess(1 - d, 0));
  }
  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(capture(How::kUnifiedAddresses));
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(origin.s, &graph));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cudasim::reset_api_counts();
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  CHECK(cudasim::api_counts().at("cudaGraphLaunch") == 2);
  CHECK(cudasim::api_counts().size() == 1);  // the replay's own waits are not API calls
  // A reader on device 1 that waits for nothing races with the replay's writes of b, which
  // ran on device 1.
  REQUIRE_CUDA(fake_kernel(reader.s, "unordered_reader", {read_all(b.p)}));
  const std::vector<std::string> reports = cudasim::take_race_reports();
  REQUIRE_FALSE(reports.empty());
  for (const std::string& report : reports) {
    const size_t writer = report.find("is not ordered after the write");
    REQUIRE(writer != std::string::npos);
    CHECK(report.find("of device 1", writer) != std::string::npos);
    CHECK(report.find("of device 0", writer) == std::string::npos);
  }
  // A reader ordered after the launch stream sees the replays' work, race-free.
  REQUIRE_CUDA(cudaStreamSynchronize(reader.s));
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  REQUIRE_CUDA(cudaEventRecord(done, origin.s));
  REQUIRE_CUDA(cudaStreamWaitEvent(reader.s, done, 0));
  std::vector<float> seen;
  REQUIRE_CUDA(fake_kernel(reader.s, "ordered_reader", {read_all(b.p)}, [&seen, p = b.p] {
    seen.assign(p, p + 4);
  }));
  REQUIRE_CUDA(cudaStreamSynchronize(reader.s));
  CHECK(seen == std::vector<float>(4, 15.0f));  // a: 0 -> 1 -> 3 -> 7; b = 2 * 7 + 1
  CHECK(cudasim::take_race_reports().empty());
  CHECK(read(a) == std::vector<float>(4, 7.0f));

  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  for (cudaEvent_t e : {fork, join, done}) REQUIRE_CUDA(cudaEventDestroy(e));
  for (int d : {0, 1}) {
    REQUIRE_CUDA(cudaSetDevice(d));
    REQUIRE_CUDA(cudaDeviceDisablePeerAccess(1 - d));
  }
  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  cudasim::set_race_policy(previous);
  clean();
}

TEST_CASE("a stream joins through another: the origin's wait covers what that one waited for") {
  clean();
  DeviceFloats x(4), y(4);
  Stream origin, a, b;
  std::vector<cudaEvent_t> events(4);
  for (cudaEvent_t& e : events) REQUIRE_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  REQUIRE_CUDA(cudaMemsetAsync(x.p, 0, x.bytes(), origin.s));
  REQUIRE_CUDA(cudaMemsetAsync(y.p, 0, y.bytes(), origin.s));
  REQUIRE_CUDA(cudaStreamSynchronize(origin.s));
  // origin -> a -> b; b's work joins a, a joins origin. `late`: b works again after a's wait.
  auto capture = [&](bool late) {
    REQUIRE_CUDA(cudaStreamBeginCapture(origin.s, cudaStreamCaptureModeGlobal));
    REQUIRE_CUDA(cudaEventRecord(events[0], origin.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(a.s, events[0], 0));
    REQUIRE_CUDA(cudaEventRecord(events[1], a.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(b.s, events[1], 0));
    REQUIRE_CUDA(twice_plus_one(b.s, x.p, x.n));
    REQUIRE_CUDA(cudaEventRecord(events[2], b.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(a.s, events[2], 0));
    REQUIRE_CUDA(twice_plus_one(a.s, y.p, y.n));
    if (late) REQUIRE_CUDA(twice_plus_one(b.s, x.p, x.n));
    REQUIRE_CUDA(cudaEventRecord(events[3], a.s));
    REQUIRE_CUDA(cudaStreamWaitEvent(origin.s, events[3], 0));
  };
  capture(/*late=*/true);
  end_capture_expecting(origin.s, cudaErrorStreamCaptureUnjoined);
  capture(/*late=*/false);
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamEndCapture(origin.s, &graph));
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, origin.s));
  CHECK(read(x) == std::vector<float>(4, 1.0f));
  CHECK(read(y) == std::vector<float>(4, 1.0f));
  REQUIRE_CUDA(cudaGraphExecDestroy(exec));
  REQUIRE_CUDA(cudaGraphDestroy(graph));
  for (cudaEvent_t e : events) REQUIRE_CUDA(cudaEventDestroy(e));
}
