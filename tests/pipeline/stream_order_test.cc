// The order of stream, event and copy calls a Pipe makes (Note [Streams in the pipeline],
// pipeline/transport.h), observed without a GPU.
//
// This binary registers a fake "CUDA" for its whole process: a DeviceBackend that logs every
// call (streams and events are heap tokens, copies are memcpy), an allocator of host memory
// that logs the stream each block is allocated for, and the CPU kernel table as the CUDA one.
// A Pipe on cuda:0 / cuda:1 therefore runs through exactly the code a GPU run takes, with
// real numbers, and the log says which stream each call went to, from which thread.
//
// Names in the log: a stream is "<device>.s<k>", the k-th stream created on that device
// (a Pipe creates its workers' compute streams first, so cuda:0.s1 is worker 0's); an event
// is "<stream>.e<k>", the k-th event recorded on that stream; a memory block is named by the
// stream it was allocated for ("block(cuda:1.s2)"; the caller's blocks are "block(default)").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "pipeline/pipe.h"
#include "pipeline/transport.h"
#include "tensor/allocator.h"
#include "tensor/generator.h"
#include "tensor/kernels.h"
#include "tensor/stream.h"
#include "tests/pipeline/pipe_test_util.h"

using namespace pipewright;
using namespace pipewright::pipeline;
using namespace pipewright::pipeline::testing;

namespace {

struct Entry {
  std::thread::id thread;
  std::string text;
  bool alloc = false;  // an allocation (kept apart from the stream calls)
};

/// The shared log and the names of streams, events and blocks. Thread-safe.
class Recorder {
 public:
  void log(std::string text, bool alloc = false) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (on_) entries_.push_back({std::this_thread::get_id(), std::move(text), alloc});
  }
  void start() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
    streams_per_device_.clear();  // names restart: cuda:0.s1 is the next stream made on cuda:0
    events_per_stream_.clear();
    on_ = true;
  }
  std::vector<Entry> stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    on_ = false;
    return std::move(entries_);
  }

  std::string new_stream(void* handle, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string name =
        "cuda:" + std::to_string(device) + ".s" + std::to_string(++streams_per_device_[device]);
    stream_names_[handle] = name;
    return name;
  }
  std::string stream(void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = stream_names_.find(handle);
    return handle == nullptr ? "default" : it == stream_names_.end() ? "?" : it->second;
  }
  std::string recorded(void* event, const std::string& stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string name = stream + ".e" + std::to_string(++events_per_stream_[stream]);
    event_names_[event] = name;
    return name;
  }
  std::string event(void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = event_names_.find(handle);
    return it == event_names_.end() ? "unrecorded" : it->second;
  }
  void allocated(void* ptr, const std::string& stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    block_owner_[ptr] = stream;
  }
  void freed(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    block_owner_.erase(ptr);
  }
  std::string block(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = block_owner_.find(const_cast<void*>(ptr));
    return it == block_owner_.end() ? "host" : "block(" + it->second + ")";
  }

 private:
  std::mutex mutex_;
  bool on_ = false;
  std::vector<Entry> entries_;
  std::map<int, int> streams_per_device_;
  std::map<std::string, int> events_per_stream_;
  std::map<void*, std::string> stream_names_, event_names_, block_owner_;
};

Recorder& recorder() {
  static Recorder* r = new Recorder();
  return *r;
}

class RecordingBackend final : public DeviceBackend {
 public:
  int device_count() override { return 2; }
  void* create_stream(int device) override {
    void* s = new char;
    recorder().log("create_stream " + recorder().new_stream(s, device));
    return s;
  }
  void destroy_stream(int, void* s) override {
    recorder().log("destroy_stream " + recorder().stream(s));
    delete static_cast<char*>(s);
  }
  void synchronize_stream(int, void* s) override {
    recorder().log("synchronize_stream " + recorder().stream(s));
  }
  void* create_event(int, bool timing) override {
    void* e = new char;
    if (timing) {
      std::lock_guard<std::mutex> lock(clock_mutex_);
      clock_[e] = 0;
    }
    return e;
  }
  void destroy_event(int, void* e) override {
    {
      std::lock_guard<std::mutex> lock(clock_mutex_);
      clock_.erase(e);
    }
    recorder().log("destroy_event " + recorder().event(e));
    delete static_cast<char*>(e);
  }
  void record_event(int, void* e, void* s) override {
    {
      // The fake device's clock: each stream's time advances 1 ms at every timing event
      // recorded on it, so an event's time is its rank among its stream's timing events.
      std::lock_guard<std::mutex> lock(clock_mutex_);
      if (auto it = clock_.find(e); it != clock_.end()) it->second = ++ticks_[s];
    }
    const std::string stream = recorder().stream(s);
    recorder().log("record_event " + recorder().recorded(e, stream) + " on " + stream);
  }
  void stream_wait_event(int, void* s, void* e) override {
    recorder().log("stream_wait_event " + recorder().stream(s) + " waits " + recorder().event(e));
  }
  void synchronize_event(int, void* e) override {
    recorder().log("synchronize_event " + recorder().event(e));
  }
  float event_elapsed_ms(int, void* start, void* end) override {
    std::lock_guard<std::mutex> lock(clock_mutex_);
    return static_cast<float>(clock_.at(end) - clock_.at(start));
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
            int /*stream_device_index*/, void* s) override {
    recorder().log("copy " + src_device.str() + "->" + dst_device.str() + " on " +
                   recorder().stream(s) + ": " + recorder().block(src) + " -> " +
                   recorder().block(dst));
    std::memcpy(dst, src, bytes);
  }
  void record_stream(int, void* ptr, int, void* s) override {
    recorder().log("record_stream " + recorder().block(ptr) + " on " + recorder().stream(s));
  }

 private:
  std::mutex clock_mutex_;
  std::map<void*, int64_t> clock_;  // timing events: their time in ms
  std::map<void*, int64_t> ticks_;  // per stream: its timing events so far
};

/// Host memory standing in for a GPU's; logs the stream of each allocation.
class RecordingAllocator final : public Allocator {
 public:
  using Allocator::Allocator;
  void* allocate(size_t bytes, void* stream) override {
    if (bytes == 0) return nullptr;
    void* p = ::operator new(bytes);
    count_alloc(bytes);
    const std::string name = recorder().stream(stream);
    recorder().allocated(p, name);
    recorder().log("alloc " + device().str() + " for " + name, /*alloc=*/true);
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    if (ptr == nullptr) return;
    recorder().freed(ptr);
    count_free(bytes);
    ::operator delete(ptr);
  }
};

/// Installs the fake CUDA once per process.
void install_fake_cuda() {
  static const bool installed = [] {
    register_backend(DeviceType::kCUDA, new RecordingBackend());
    register_allocator_factory(DeviceType::kCUDA,
                               [](Device d) -> Allocator* { return new RecordingAllocator(d); });
    register_kernels(DeviceType::kCUDA, &kernels_for(DeviceType::kCPU));
    return true;
  }();
  (void)installed;
}

/// The stream calls of one thread, in order (allocations left out).
std::vector<std::string> calls_of(const std::vector<Entry>& log, std::thread::id thread) {
  std::vector<std::string> out;
  for (const Entry& e : log) {
    if (e.thread == thread && !e.alloc) out.push_back(e.text);
  }
  return out;
}

/// The allocations of one thread, in order.
std::vector<std::string> allocs_of(const std::vector<Entry>& log, std::thread::id thread) {
  std::vector<std::string> out;
  for (const Entry& e : log) {
    if (e.thread == thread && e.alloc) out.push_back(e.text);
  }
  return out;
}

/// The thread that issued `text` first (a worker is recognised by a call on its own stream).
std::thread::id thread_of(const std::vector<Entry>& log, const std::string& text) {
  for (const Entry& e : log) {
    if (e.text == text) return e.thread;
  }
  FAIL("no call \"" << text << "\" in the log");
  return {};
}

/// Every allocation in `allocs` is "alloc <device> for <stream>" with one of the allowed
/// (device, stream) pairs.
bool only_allocs(const std::vector<std::string>& allocs, const std::vector<std::string>& allowed) {
  for (const std::string& a : allocs) {
    bool ok = false;
    for (const std::string& x : allowed) ok = ok || a == "alloc " + x;
    if (!ok) {
      UNSCOPED_INFO("unexpected allocation: " << a);
      return false;
    }
  }
  return true;
}

/// Linear(4,8) ReLU | Linear(8,3): two stages of a tiny MLP.
nn::Sequential two_stage_mlp(uint64_t seed) {
  Generator g(seed);
  GeneratorGuard guard(g);
  return nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
}

const std::string C0 = "cuda:0.s1", C1 = "cuda:1.s1";  // the workers' compute streams

}  // namespace

TEST_CASE("two GPUs: the copy stream waits for the producer, the consumer for the copy") {
  install_fake_cuda();
  recorder().start();
  std::vector<Entry> log;
  {
    Pipe pipe(two_stage_mlp(1), {.balance = {2, 1},
                                 .devices = {Device::cuda(0), Device::cuda(1)},
                                 .chunks = 1,
                                 .schedule = {.recompute = Checkpoint::kNever}});
    const Tensor x = randn({2, 4}, 2).to(Device::cuda(0));
    const Tensor out = pipe.forward(x);
    out.backward(Tensor::ones(out.shape(), {.device = Device::cuda(1)}));
    log = recorder().stop();
  }
  // The Pipe made one compute stream per worker, on the caller's thread, before anything ran,
  // and made it wait for the partitions' placement on the caller's stream.
  CHECK(thread_of(log, "create_stream " + C0) == std::this_thread::get_id());
  CHECK(thread_of(log, "create_stream " + C1) == std::this_thread::get_id());
  CHECK(thread_of(log, "stream_wait_event " + C0 + " waits default.e1") == std::this_thread::get_id());
  CHECK(thread_of(log, "stream_wait_event " + C1 + " waits default.e2") == std::this_thread::get_id());

  const std::string K1 = "cuda:1.s2";  // copies into cuda:1 (activations)
  const std::string K0 = "cuda:0.s2";  // copies into cuda:0 (gradients)
  const std::thread::id w0 = thread_of(log, "record_stream block(default) on " + C0);
  const std::thread::id w1 = thread_of(log, "stream_wait_event " + C1 + " waits " + K1 + ".e1");
  CHECK(w0 != w1);

  // Worker 0: F (input marked as used by C0; output copied to cuda:1 on K1 once C0 has
  // produced it), then B (waits for the gradient's copy on K0 before computing). Each
  // execute() (forward, then backward) starts by waiting for the caller's stream and ends by
  // recording `done` (Note [The caller's streams], pipeline/runtime.cc); the caller is on the
  // default streams here, whose events are default.e1 (cuda:0) and default.e2 (cuda:1), the
  // fences the Pipe's constructor put after placing the partitions, then e3, e4, e5, e6.
  CHECK(calls_of(log, w0) == std::vector<std::string>{
      "stream_wait_event " + C0 + " waits default.e3",          //    entry (forward)
      "record_stream block(default) on " + C0,                  // the caller's micro-batch
      "record_event " + C0 + ".e1 on " + C0,                    // 1. producer's point
      "create_stream " + K1,                                    //    (first use)
      "stream_wait_event " + K1 + " waits " + C0 + ".e1",       // 2. copy waits for it
      "copy cuda:0->cuda:1 on " + K1 + ": block(" + C0 + ") -> block(" + K1 + ")",  // 3.
      "record_stream block(" + C0 + ") on " + K1,               //    x read on K1
      "record_event " + K1 + ".e1 on " + K1,                    // 4. copy's point
      "destroy_event " + C0 + ".e1",
      "record_event " + C0 + ".e2 on " + C0,                    //    done (forward)
      "stream_wait_event " + C0 + " waits default.e5",          //    entry (backward)
      "stream_wait_event " + C0 + " waits " + K0 + ".e1",       // 5. B waits for the copy
      "record_stream block(" + K0 + ") on " + C0,               // 6. y used on C0
      "destroy_event " + K0 + ".e1",
      "record_event " + C0 + ".e3 on " + C0,                    //    done (backward)
  });
  // Worker 1: F waits for the activation's copy; B sends the gradient the same way.
  CHECK(calls_of(log, w1) == std::vector<std::string>{
      "stream_wait_event " + C1 + " waits default.e4",
      "stream_wait_event " + C1 + " waits " + K1 + ".e1",
      "record_stream block(" + K1 + ") on " + C1,
      "destroy_event " + K1 + ".e1",
      "record_event " + C1 + ".e1 on " + C1,
      "stream_wait_event " + C1 + " waits default.e6",
      "record_stream block(default) on " + C1,                  // the user's dOut
      "record_event " + C1 + ".e2 on " + C1,
      "create_stream " + K0,
      "stream_wait_event " + K0 + " waits " + C1 + ".e2",
      "copy cuda:1->cuda:0 on " + K0 + ": block(" + C1 + ") -> block(" + K0 + ")",
      "record_stream block(" + C1 + ") on " + K0,
      "record_event " + K0 + ".e1 on " + K0,
      "destroy_event " + C1 + ".e2",
      "record_event " + C1 + ".e3 on " + C1,
  });
  // The events a consumer waits for were recorded before (the log is one ordered sequence).
  auto index_of = [&](const std::string& text) {
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].text == text) return i;
    }
    return log.size();
  };
  CHECK(index_of("record_event " + K1 + ".e1 on " + K1) <
        index_of("stream_wait_event " + C1 + " waits " + K1 + ".e1"));
  CHECK(index_of("record_event " + K0 + ".e1 on " + K0) <
        index_of("stream_wait_event " + C0 + " waits " + K0 + ".e1"));
  // Each worker's kernels allocate for its own stream; the only other allocations are the
  // destinations of the copies it issues, on the copy stream of the receiver's device.
  CHECK(only_allocs(allocs_of(log, w0), {"cuda:0 for " + C0, "cuda:1 for " + K1}));
  CHECK(only_allocs(allocs_of(log, w1), {"cuda:1 for " + C1, "cuda:0 for " + K0}));
  CHECK(allocs_of(log, w0).size() >= 3);  // at least its output, the copy, the weight grads
  CHECK(allocs_of(log, w1).size() >= 3);
}

TEST_CASE("one GPU: no copy; the consumer's stream waits for the producer's") {
  install_fake_cuda();
  recorder().start();
  std::vector<Entry> log;
  {
    Pipe pipe(two_stage_mlp(1), {.balance = {2, 1},
                                 .devices = {Device::cuda(0), Device::cuda(0)},
                                 .chunks = 1,
                                 .schedule = {.recompute = Checkpoint::kNever}});
    const Tensor x = randn({2, 4}, 2).to(Device::cuda(0));
    const Tensor out = pipe.forward(x);
    out.backward(Tensor::ones(out.shape(), {.device = Device::cuda(0)}));
    log = recorder().stop();
  }
  const std::string A = "cuda:0.s1", B = "cuda:0.s2";  // workers 0 and 1, both on cuda:0
  CHECK(thread_of(log, "create_stream " + A) == std::this_thread::get_id());
  CHECK(thread_of(log, "create_stream " + B) == std::this_thread::get_id());
  const std::thread::id w0 = thread_of(log, "record_stream block(default) on " + A);
  const std::thread::id w1 = thread_of(log, "stream_wait_event " + B + " waits " + A + ".e1");
  CHECK(calls_of(log, w0) == std::vector<std::string>{
      "stream_wait_event " + A + " waits default.e3",   // entry (forward)
      "record_stream block(default) on " + A,
      "record_event " + A + ".e1 on " + A,         // the activation is ready on A
      "record_event " + A + ".e2 on " + A,         // done (forward)
      "stream_wait_event " + A + " waits default.e5",   // entry (backward)
      "stream_wait_event " + A + " waits " + B + ".e2",
      "record_stream block(" + B + ") on " + A,    // B's gradient is now used on A
      "destroy_event " + B + ".e2",
      "record_event " + A + ".e3 on " + A,         // done (backward)
  });
  CHECK(calls_of(log, w1) == std::vector<std::string>{
      "stream_wait_event " + B + " waits default.e4",
      "stream_wait_event " + B + " waits " + A + ".e1",
      "record_stream block(" + A + ") on " + B,
      "destroy_event " + A + ".e1",
      "record_event " + B + ".e1 on " + B,
      "stream_wait_event " + B + " waits default.e6",
      "record_stream block(default) on " + B,
      "record_event " + B + ".e2 on " + B,
      "record_event " + B + ".e3 on " + B,
  });
  CHECK(only_allocs(allocs_of(log, w0), {"cuda:0 for " + A}));
  CHECK(only_allocs(allocs_of(log, w1), {"cuda:0 for " + B}));
}

TEST_CASE("host and GPU stages: both copies run on the GPU's copy streams; the host waits") {
  install_fake_cuda();
  recorder().start();
  std::vector<Entry> log;
  {
    Pipe pipe(two_stage_mlp(1), {.balance = {2, 1},
                                 .devices = {Device::cpu(0), Device::cuda(0)},
                                 .chunks = 1,
                                 .schedule = {.recompute = Checkpoint::kNever}});
    const Tensor out = pipe.forward(randn({2, 4}, 2));
    out.backward(Tensor::ones(out.shape(), {.device = Device::cuda(0)}));
    log = recorder().stop();
  }
  // Only cuda:0 streams go through the fake backend: the CPU worker's stream is a CPU one.
  const std::string C = "cuda:0.s1", Kin = "cuda:0.s2", Kout = "cuda:0.s3";
  const std::thread::id gpu = thread_of(log, "stream_wait_event " + C + " waits " + Kin + ".e1");
  const std::thread::id host = thread_of(log, "synchronize_event " + Kout + ".e1");
  CHECK(calls_of(log, host) == std::vector<std::string>{
      "create_stream " + Kin,                       // H2D runs on cuda:0's activation stream
      "copy cpu:0->cuda:0 on " + Kin + ": host -> block(" + Kin + ")",
      "record_event " + Kin + ".e1 on " + Kin,
      "synchronize_event " + Kout + ".e1",          // a host "stream" waits by blocking
      "destroy_event " + Kout + ".e1",
  });
  // (The CPU worker's entry and exit events are CPU ones: no-ops, not logged.)
  CHECK(calls_of(log, gpu) == std::vector<std::string>{
      "stream_wait_event " + C + " waits default.e2",   // entry (forward)
      "stream_wait_event " + C + " waits " + Kin + ".e1",
      "record_stream block(" + Kin + ") on " + C,
      "destroy_event " + Kin + ".e1",
      "record_event " + C + ".e1 on " + C,              // done (forward)
      "stream_wait_event " + C + " waits default.e3",   // entry (backward)
      "record_stream block(default) on " + C,
      "record_event " + C + ".e2 on " + C,
      "create_stream " + Kout,                      // D2H runs on cuda:0's gradient stream
      "stream_wait_event " + Kout + " waits " + C + ".e2",
      "copy cuda:0->cpu:0 on " + Kout + ": block(" + C + ") -> host",
      "record_stream block(" + C + ") on " + Kout,
      "record_event " + Kout + ".e1 on " + Kout,
      "destroy_event " + C + ".e2",
      "record_event " + C + ".e3 on " + C,              // done (backward)
  });
}

TEST_CASE("a Pipe over (fake) GPUs equals the plain model, under GPipe and 1F1B") {
  install_fake_cuda();
  const int chunks = GENERATE(1, 3, 4);
  CAPTURE(chunks);
  nn::Sequential plain = small_mlp(7);
  Pipe pipe(small_mlp(7), {.balance = {3, 2},
                           .devices = {Device::cuda(0), Device::cuda(1)},
                           .chunks = chunks,
                           .schedule = {.recompute = Checkpoint::kExceptLast}});
  const Tensor x0 = randn({7, 4}, 8), target = randn({7, 3}, 9);

  Tensor x = x0.clone().set_requires_grad(true);
  Tensor ref_loss = nn::mse_loss(plain.forward(x), target);
  ref_loss.backward();

  Tensor xp = x0.to(Device::cuda(0)).set_requires_grad(true);
  Tensor out = pipe.forward(xp);
  REQUIRE(out.device() == Device::cuda(1));
  Tensor loss = nn::mse_loss(out, target.to(Device::cuda(1)));
  loss.backward();
  CHECK(std::abs(loss.item() - ref_loss.item()) <= 2e-6);
  CHECK(max_diff(xp.grad(), x.grad()) <= 2e-6);
  CHECK(max_grad_diff(pipe.module(), plain) <= 2e-6);

  plain.zero_grad();
  pipe.zero_grad();
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };
  nn::mse_loss(plain.forward(x0), target).backward();
  StepResult r = pipe.train_step(x0, target, mse, {.schedule = named_schedule(pipe, x0, "1f1b")});
  CHECK(std::abs(r.loss - ref_loss.item()) <= 2e-6);
  CHECK(max_grad_diff(pipe.module(), plain) <= 2e-6);
}

TEST_CASE("device_timeline: a CUDA worker's actions on the device's clock, from its events") {
  // Note [Device timelines] (pipeline/runtime_timeline.cc). The fake device's clock advances
  // 1 ms at every timing event recorded on a stream: a worker's reference, then each action's
  // start and end. On the device's clock every action therefore lasts exactly 1 ms and
  // starts 1 ms after the worker's previous one ended, whatever the host's timing (a step
  // without the option keeps the host's); the step computes what it computes without it.
  install_fake_cuda();
  const std::string schedule = GENERATE("gpipe", "1f1b");
  CAPTURE(schedule);
  const PipeOptions options{.balance = {3, 2},
                            .devices = {Device::cuda(0), Device::cuda(1)},
                            .chunks = 3,
                            .schedule = {.name = schedule, .recompute = Checkpoint::kNever}};
  const Tensor x = randn({7, 4}, 8).to(Device::cuda(0)), target = randn({7, 3}, 9);
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };

  Pipe plain(small_mlp(7), options);
  const StepResult host = plain.train_step(x, target, mse);
  Pipe timed(small_mlp(7), options);
  const StepResult device = timed.train_step(x, target, mse, {.device_timeline = true});

  CHECK(device.loss == host.loss);  // the same kernels, the same order: the same bits
  CHECK(max_grad_diff(timed.module(), plain.module()) == 0.0);
  CHECK(host.trace.events().size() == device.trace.events().size());
  CHECK(std::none_of(host.trace.events().begin(), host.trace.events().end(),
                     [](const TraceEvent& e) { return std::abs(e.duration_us() - 1000) < 1e-6; }));
  for (int w = 0; w < 2; ++w) {
    CAPTURE(w);
    std::vector<TraceEvent> events;
    for (const TraceEvent& e : device.trace.events()) {
      if (e.worker == w) events.push_back(e);
    }
    REQUIRE(events.size() == 6);  // F and B of 3 micro-batches
    for (size_t i = 0; i < events.size(); ++i) {
      CAPTURE(i);
      // (exact but for the rounding of reference_us + 1000 k)
      CHECK(events[i].duration_us() == Approx(1000.0).margin(1e-6));
      if (i > 0) CHECK(events[i].start_us - events[i - 1].end_us == Approx(1000.0).margin(1e-6));
    }
  }
}

TEST_CASE("stream helpers the transport relies on (tensor/stream.h)") {
  install_fake_cuda();
  // Which device's stream carries a copy: the destination's, the source's into the host.
  CHECK(copy_stream_device(Device::cpu(0), Device::cuda(1)) == Device::cuda(1));
  CHECK(copy_stream_device(Device::cuda(1), Device::cpu(0)) == Device::cuda(1));
  CHECK(copy_stream_device(Device::cuda(0), Device::cuda(1)) == Device::cuda(1));
  CHECK(copy_stream_device(Device::cpu(2), Device::cpu(3)) == Device::cpu(3));
  recorder().start();
  const Stream k0 = Stream::create(Device::cuda(0));
  float a = 1.5f, b = 0.0f;
  CHECK_THROWS_WITH(copy_on_stream(&b, Device::cuda(1), &a, Device::cuda(0), 4, k0),
                    "copy_on_stream: a copy cuda:0 -> cuda:1 runs on a stream of cuda:1, got "
                    "one of cuda:0");

  const Tensor t = Tensor::zeros({4, 2}, {.device = Device::cuda(0)});
  record_stream(t.slice(2, 4), k0);                   // a view records its whole block
  record_stream(Tensor::zeros({3}), k0);              // a CPU tensor: nothing to record
  record_stream(t, Stream::default_stream(Device::cpu(0)));  // another device type: ignored
  record_stream(Tensor(), k0);                        // undefined: ignored
  Event on_gpu(Device::cuda(0));
  on_gpu.record(k0);
  on_gpu.wait(Stream::default_stream(Device::cpu(0)));  // the host waits by blocking
  Event on_cpu(Device::cpu(0));
  on_cpu.record(Stream::default_stream(Device::cpu(0)));
  on_cpu.wait(k0);                                    // CPU work is done: nothing to wait for
  const Stream k1 = Stream::create(Device::cuda(1));
  on_gpu.wait(k1);                                    // a peer's event: the stream's device
  const std::vector<Entry> log = recorder().stop();
  std::vector<std::string> calls;
  for (const Entry& e : log) {
    if (!e.alloc) calls.push_back(e.text);
  }
  CHECK(calls == std::vector<std::string>{
      "create_stream cuda:0.s1",
      "record_stream block(default) on cuda:0.s1",
      "record_event cuda:0.s1.e1 on cuda:0.s1",
      "synchronize_event cuda:0.s1.e1",
      "create_stream cuda:1.s1",
      "stream_wait_event cuda:1.s1 waits cuda:0.s1.e1",
  });
}

namespace {

/// Index in `log` of the first entry `text` (log.size() when absent).
size_t index_in(const std::vector<Entry>& log, const std::string& text) {
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].text == text) return i;
  }
  return log.size();
}

/// True when `log` has `text`, issued by `thread`.
bool has_call(const std::vector<Entry>& log, std::thread::id thread, const std::string& text) {
  for (const Entry& e : log) {
    if (e.thread == thread && e.text == text) return true;
  }
  UNSCOPED_INFO("missing: " << text);
  return false;
}

}  // namespace

// Note [The caller's streams] (pipeline/runtime.cc).
TEST_CASE("the caller's own streams: execute() fences them at both ends, results are recorded") {
  install_fake_cuda();
  recorder().start();
  std::vector<Entry> log;
  nn::Sequential plain = two_stage_mlp(1);
  const Tensor x0 = randn({2, 4}, 2);
  Tensor xp, out, out_ref;
  {
    Pipe pipe(two_stage_mlp(1), {.balance = {2, 1},
                                 .devices = {Device::cuda(0), Device::cuda(1)},
                                 .chunks = 1,
                                 .schedule = {.recompute = Checkpoint::kNever}});
    // The caller computes on created streams of its own (cuda:0.s2 and cuda:1.s2: the Pipe
    // made the workers' cuda:0.s1 and cuda:1.s1 first), as a training loop overlapping its
    // data loading would.
    const Stream p0 = Stream::create(Device::cuda(0)), p1 = Stream::create(Device::cuda(1));
    StreamGuard on_p0(p0), on_p1(p1);
    xp = x0.to(Device::cuda(0)).set_requires_grad(true);
    out = pipe.forward(xp);
    out.backward(Tensor::ones(out.shape(), {.device = Device::cuda(1)}));
    log = recorder().stop();
    out_ref = plain.forward(x0);
  }
  const std::string P0 = "cuda:0.s2", P1 = "cuda:1.s2";
  const std::thread::id caller = std::this_thread::get_id();
  const std::thread::id w0 = thread_of(log, "record_stream block(" + P0 + ") on " + C0);
  const std::thread::id w1 = thread_of(log, "stream_wait_event " + C1 + " waits " + P1 + ".e1");
  REQUIRE(w0 != caller);
  REQUIRE(w1 != caller);

  // Entry: each worker's first call of each execute() (forward, then backward) waits for the
  // caller's stream of its device, at the point recorded when the call began.
  const std::vector<std::string> calls0 = calls_of(log, w0), calls1 = calls_of(log, w1);
  REQUIRE(!calls0.empty());
  REQUIRE(!calls1.empty());
  CHECK(calls0.front() == "stream_wait_event " + C0 + " waits " + P0 + ".e1");
  CHECK(calls1.front() == "stream_wait_event " + C1 + " waits " + P1 + ".e1");
  CHECK(has_call(log, caller, "record_event " + P0 + ".e1 on " + P0));
  CHECK(has_call(log, caller, "record_event " + P1 + ".e1 on " + P1));
  CHECK(has_call(log, w0, "stream_wait_event " + C0 + " waits " + P0 + ".e2"));  // backward
  CHECK(has_call(log, w1, "stream_wait_event " + C1 + " waits " + P1 + ".e2"));

  // Exit: each worker's last call records its `done` event, which the caller's stream of
  // that device waits for before execute() returns.
  const std::string done0 = calls0.back(), done1 = calls1.back();
  CHECK(done0.rfind("record_event " + C0 + ".e", 0) == 0);
  CHECK(done1.rfind("record_event " + C1 + ".e", 0) == 0);
  auto event_of = [](const std::string& record) {  // "record_event E on S" -> "E"
    const size_t start = std::string("record_event ").size();
    return record.substr(start, record.find(" on ") - start);
  };
  const std::string done0_event = event_of(done0), done1_event = event_of(done1);
  CHECK(has_call(log, caller, "stream_wait_event " + P0 + " waits " + done0_event));
  CHECK(has_call(log, caller, "stream_wait_event " + P1 + " waits " + done1_event));
  CHECK(index_in(log, done1) < index_in(log, "stream_wait_event " + P1 + " waits " + done1_event));

  // Handed back: the output (on worker 1's block), the input gradient and stage 0's
  // parameter gradients (worker 0's blocks), stage 1's parameter gradients (worker 1's), each
  // recorded on the caller's stream of its device, by the caller.
  CHECK(has_call(log, caller, "record_stream block(" + C1 + ") on " + P1));
  CHECK(has_call(log, caller, "record_stream block(" + C0 + ") on " + P0));

  // And the numbers are the plain model's.
  CHECK(max_diff(out, out_ref) <= 2e-6);
}

// Note [One wait per copy stream and source]
// (transport.cc). cpu:0 -> cuda:1 and cuda:0 -> cuda:1 share cuda:1's copy stream; the copy
// from cuda:0 must still wait for cuda:0's `ready`, even though the stream already waited for
// cpu:0's (a no-op CPU event) first.
TEST_CASE("a message from two devices sharing a copy stream waits for each source's producer") {
  install_fake_cuda();
  recorder().start();
  std::vector<Entry> log;
  std::vector<Tensor> received;
  {
    const Stream producer = Stream::create(Device::cuda(0));  // cuda:0.s1
    StreamGuard on_producer(producer);
    const Tensor on_host = Tensor::full({3}, 2.0);
    const Tensor on_gpu = Tensor::full({2}, 5.0, {.device = Device::cuda(0)});  // on cuda:0.s1
    InProcessTransport transport;
    const MessageKey key{0, 0, Direction::kActivation};
    transport.send(key, {on_host, on_gpu}, Device::cuda(1));
    received = transport.recv(key);
    log = recorder().stop();
  }
  const std::string K = "cuda:1.s1";  // cuda:1's activation copy stream
  const std::vector<std::string> calls = calls_of(log, std::this_thread::get_id());
  auto at = [&](const std::string& text) {
    const auto it = std::find(calls.begin(), calls.end(), text);
    UNSCOPED_INFO("looking for: " << text);
    return static_cast<size_t>(it - calls.begin());
  };
  const size_t ready = at("record_event cuda:0.s1.e1 on cuda:0.s1");
  const size_t wait = at("stream_wait_event " + K + " waits cuda:0.s1.e1");
  const size_t copy = at("copy cuda:0->cuda:1 on " + K + ": block(cuda:0.s1) -> block(" + K + ")");
  CHECK(ready < calls.size());
  CHECK(wait < calls.size());
  CHECK(copy < calls.size());
  CHECK(ready < wait);
  CHECK(wait < copy);
  REQUIRE(received.size() == 2);
  CHECK(received[0].to_vector<float>() == std::vector<float>(3, 2.0f));
  CHECK(received[1].to_vector<float>() == std::vector<float>(2, 5.0f));
}
