// Work across streams and GPUs that only the library's events order: cross-GPU to() (on the
// default streams and on created ones), a caller on its own streams around a pipe step, a
// recycled cuBLAS handle's workspace, a copy stream fed by two GPUs.
//
// Every case issues work whose ordering the library's events provide and nothing else would:
// on created (non-default) streams, which are not ordered with each other, or on the default
// streams of two GPUs, which are not ordered with each other either. Under --config=cudasim
// the stream race detector refuses the first unordered access (PW_CUDA_CHECK throws a
// CudaError whose text is the race report), so a missing wait fails with "race" in the
// message; on a real GPU the same mistakes give wrong values only sometimes, which the value
// checks then catch. No host synchronisation is added anywhere that could hide a missing event.
//
// The cross-GPU to() and two-source cases need two GPUs (cudasim simulates two); the cuBLAS
// case one; the pipe case runs its two stages on two GPUs, or both on cuda:0 where there is one.
#include <catch2/catch.hpp>

#include <cmath>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_kernels/blas.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/optim_sgd.h"
#include "pipeline/pipe.h"
#include "pipeline/transport.h"
#include "tensor/generator.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tests/cuda/gpu_test.h"
#include "tests/pipeline/pipe_test_util.h"

namespace pipewright::testing {
namespace {

const Device kGpu0 = Device::cuda(0), kGpu1 = Device::cuda(1);

bool two_gpus_or_skip() { return gpus_available_or_skip(2); }

/// x on the current stream of x's device: x + 1, `times` times, in place (queued kernels
/// that write x, so a reader on another stream must be ordered after all of them).
void bump(Tensor& x, int times) {
  const Tensor one = Tensor::ones(x.shape(), {x.dtype(), x.device()});
  for (int i = 0; i < times; ++i) ops::add_(x, one);
}

/// Leaves, in the caching allocator of `device`, a free block of `numel` floats for the
/// current stream there, last written by a kernel still possibly queued on that stream: the
/// next allocation of that size on that stream reuses it at once (Note [Stream-aware reuse]).
void leave_busy_block(Device device, int64_t numel) {
  Tensor scratch = Tensor::zeros({numel}, {DType::kFloat32, device});
  bump(scratch, 3);
}  // freed here

/// Runs `f` on a new thread and joins it; an exception of `f` is rethrown here (a CudaError
/// escaping a std::thread would terminate the whole test binary).
template <class F>
void on_thread(F f) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      f();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

// x.to(other GPU) must run after pending work on the source's current stream and on
// the destination's current stream, and the destination's stream must wait for it.
TEST_CASE("cross-GPU to() on the default streams is ordered on both GPUs", "[cuda][order]") {
  if (!two_gpus_or_skip()) return;
  // x written by queued kernels on cuda:0's default stream. A copy on cuda:1's default stream
  // (the backend's guess for a null stream) would not be ordered after them.
  Tensor x = Tensor::zeros({1 << 14}, {DType::kFloat32, kGpu0});
  bump(x, 4);
  const Tensor y = x.to(kGpu1);
  // Read y with a kernel on cuda:1's default stream, then overwrite x on cuda:0's: both must
  // be ordered with the copy (the latter is the copy's write-after-read hazard).
  const Tensor z = ops::mul(y, 2.0);
  bump(x, 1);
  check_close(z, Tensor::full({1 << 14}, 8.0), 0.0, 0.0);
  check_close(x, Tensor::full({1 << 14}, 5.0), 0.0, 0.0);
}

TEST_CASE("cross-GPU to() on created streams waits for the destination's stream",
          "[cuda][order]") {
  if (!two_gpus_or_skip()) return;
  const Stream s0 = Stream::create(kGpu0), s1 = Stream::create(kGpu1);
  StreamGuard on_s0(s0), on_s1(s1);
  constexpr int64_t n = 1 << 14;
  Tensor x = Tensor::zeros({n}, {DType::kFloat32, kGpu0});
  bump(x, 2);
  // y's block on cuda:1 is one that s1's queued kernels still write: the copy (on s0) must
  // wait for them, which only the destination-side event provides.
  leave_busy_block(kGpu1, n);
  const Tensor y = x.to(kGpu1);
  const Tensor z = ops::add(y, 1.0);  // on s1: must wait for the copy
  bump(x, 1);                         // on s0: must not overtake the copy's read
  check_close(z, Tensor::full({n}, 3.0), 0.0, 0.0);
  check_close(x, Tensor::full({n}, 3.0), 0.0, 0.0);
}

// A caller computing on its own streams gets the pipeline's results ordered (outputs,
// input gradients, parameter gradients) and its inputs seen by the workers.
TEST_CASE("a caller on created streams uses the pipe's results safely", "[cuda][order][pipe]") {
  if (!gpu_available_or_skip()) return;
  const Device gpu0 = gpu_or_shared(0), gpu1 = gpu_or_shared(1);
  using pipeline::Checkpoint;
  using pipeline::Pipe;
  const std::string schedule = GENERATE(std::string("forward/backward"), std::string("1f1b"));
  CAPTURE(schedule);
  nn::Sequential plain = pipeline::testing::small_mlp(3);
  Pipe pipe(pipeline::testing::small_mlp(3), {.balance = {3, 2},
                                              .devices = {gpu0, gpu1},
                                              .chunks = 4,
                                              .schedule = {.recompute = Checkpoint::kExceptLast}});
  const Tensor x0 = pipeline::testing::randn({8, 4}, 4), target = pipeline::testing::randn({8, 3}, 5);
  auto mse = [](const Tensor& o, const Tensor& t) { return nn::mse_loss(o, t); };

  Tensor x_ref = x0.clone().set_requires_grad(true);
  nn::mse_loss(plain.forward(x_ref), target).backward();

  // The caller's streams, one per GPU (one stream for both stages where they share a GPU).
  const Stream p0 = Stream::create(gpu0), p1 = gpu1 == gpu0 ? p0 : Stream::create(gpu1);
  StreamGuard on_p0(p0), on_p1(p1);
  // The caller's input: copied and then written on p0 (x * 1), so worker 0 must wait for p0.
  Tensor x = ops::mul(x0.to(gpu0), 1.0);
  if (schedule == "1f1b") {
    const pipeline::StepResult r = pipe.train_step(
        x, target, mse, {.schedule = pipeline::testing::named_schedule(pipe, x, "1f1b")});
    CHECK(std::abs(r.loss - nn::mse_loss(plain.forward(x0), target).item()) <= 2e-5);
  } else {
    x.set_requires_grad(true);
    const Tensor out = pipe.forward(x);  // gathered on p1 from worker 1's blocks
    const Tensor loss = nn::mse_loss(out, target.to(gpu1));  // read on p1
    loss.backward();                     // the output gradient is written on p1
    check_close(x.grad(), x_ref.grad(), 2e-5, 2e-5);  // the input gradient, read on p0
  }
  // The parameter gradients, read (and the parameters written) by the optimizer on p0 / p1.
  const nn::NamedTensors pp = pipe.module().named_parameters(), rp = plain.named_parameters();
  REQUIRE(pp.size() == rp.size());
  for (size_t i = 0; i < pp.size(); ++i) {
    INFO(pp[i].first);
    check_close(ops::mul(pp[i].second.grad(), 1.0), rp[i].second.grad(), 2e-5, 2e-5);
  }
  nn::SGD opt(pipe.module().parameters(), {.lr = 0.1}), opt_ref(plain.parameters(), {.lr = 0.1});
  opt.step();
  opt_ref.step();
  // The next call's workers read the parameters the optimizer wrote on p0 / p1.
  const Tensor again = pipe.forward(x.detach());
  check_close(again, plain.forward(x0), 2e-5, 2e-5);
}

// GEMMs of two threads on two streams, the second thread taking over the first's
// cuBLAS handle (returned to the pool at thread exit with its GEMMs possibly still queued).
TEST_CASE("a recycled cuBLAS handle does not share its workspace across streams",
          "[cuda][order][gemm]") {
  if (!gpu_available_or_skip()) return;
  constexpr int64_t n = 96;
  const Tensor a_host = random_tensor({n, n}, DType::kFloat32, 31);
  const Tensor b_host = random_tensor({n, n}, DType::kFloat32, 32);
  const Tensor expected = ops::matmul(a_host, b_host);
  const size_t workspaces_before = cuda::blas_workspace_count();

  // Two distinct streams, kept alive here (a stream made inside the first thread would go
  // back to the stream pool at its exit and could be handed to the second one).
  const Stream s_first = Stream::create(kGpu0), s_second = Stream::create(kGpu0);
  Tensor first, second;
  auto gemms_on = [&](const Stream& s, Tensor* out) {
    StreamGuard guard(s);
    const Tensor a = a_host.to(kGpu0), b = b_host.to(kGpu0);
    Tensor c;
    for (int i = 0; i < 4; ++i) c = ops::matmul(a, b);  // queued; no synchronize
    *out = c;
  };  // the thread exits right after: its handle goes back to the pool, GEMMs still queued
  on_thread([&] { gemms_on(s_first, &first); });
  on_thread([&] { gemms_on(s_second, &second); });  // takes that handle (LIFO pool)
  // Read here, on this thread's default stream, which nothing orders after the created
  // streams (Note [Non-blocking streams]): wait for them first.
  s_first.synchronize();
  s_second.synchronize();
  check_close(first, expected, 1e-5, 1e-4);
  check_close(second, expected, 1e-5, 1e-4);
  // Workspaces exist per (handle, stream) pair (a pair may have been made by an earlier test).
  CHECK(cuda::blas_workspace_count() >= workspaces_before);
  CHECK(cuda::blas_workspace_count() >= 2);
}

// A message whose tensors come from two devices whose copies share one copy stream
// (cpu:0 -> cuda:1 and cuda:0 -> cuda:1 both use cuda:1's): the copy from cuda:0 must wait
// for cuda:0's producer even though the stream already waited for the host's (no-op) event.
TEST_CASE("a copy stream waits for every source device of a message",
          "[cuda][order][transport]") {
  if (!two_gpus_or_skip()) return;
  const Stream producer = Stream::create(kGpu0), consumer = Stream::create(kGpu1);
  constexpr int64_t n = 1 << 14;
  pipeline::InProcessTransport transport;
  const pipeline::MessageKey key{0, 0, pipeline::Direction::kActivation};
  {
    StreamGuard on_producer(producer);
    Tensor on_gpu = Tensor::zeros({n}, {DType::kFloat32, kGpu0});
    bump(on_gpu, 3);  // queued on the producer's stream
    transport.send(key, {Tensor::full({5}, 7.0), on_gpu}, kGpu1);
  }
  std::vector<Tensor> got;
  on_thread([&] {
    StreamGuard on_consumer(consumer);
    got = transport.recv(key);
    got[1] = ops::mul(got[1], 1.0);  // read on the consumer's stream
  });
  consumer.synchronize();  // the checks below read on this thread's default stream
  REQUIRE(got.size() == 2);
  check_close(got[0], Tensor::full({5}, 7.0), 0.0, 0.0);
  check_close(got[1], Tensor::full({n}, 3.0), 0.0, 0.0);
}

}  // namespace pipewright::testing
