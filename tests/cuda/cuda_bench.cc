// GPU benchmark of cuda_kernels/ (built by CI, run by hand on the device machine):
//
//   1. GEMM float32: our kernel-table gemm (cuBLAS underneath, handle pool + row-major swap)
//      against a raw cublasSgemm call, full FP32 and TF32, square sizes; TFLOP/s.
//   2. Device-to-device copy bandwidth (cudaMemcpyAsync, 256 MiB): the card's ceiling for
//      memory-bound kernels, GB/s counting bytes read + written.
//   3. ReLU (unary) bandwidth: GB/s counting bytes read + written, and as % of the copy's.
//   4. BatchNorm training forward + backward: our kernels against cuDNN's (legacy
//      cudnnBatchNormalization* API), 2-D [N, C] and 3-D [N, C, L]; GB/s of the minimum traffic
//      and as % of the copy's.
//   5. Adam (the fused optimizer kernel): GB/s of its minimum traffic (read p, g, m, v; write
//      p, m, v) and as % of the copy's.
//   6. Host cost per call: microseconds of host time per CUDA event record, per one-element
//      kernel through the kernel table, per small GEMM (ours and raw cuBLAS), per tensor op
//      (ops::add of two [64, 512] tensors: allocation + dispatch + launch) and per pinned-staged
//      host-to-device copy of a [64, 784] micro-batch; and the device's time per tiny kernel
//      back to back. What a training step of many small launches costs on the host.
//   7. Causal attention at GPT-2-small's heads (B·H = 96, D = 64), T = 1024 and 2048: the tiled
//      kernels (flash_attention and its backward; float32 inputs, and bf16 on tensor cores and
//      on CUDA cores: set_attention_tensor_cores) against the unfused
//      path's kernels (batched GEMMs around causal_softmax, storing the [N, T, T] weights);
//      ms, TFLOP/s (FlashAttention's count: 4·N·T²·D forward, 2.5× that backward, halved for
//      the causal mask) and the bytes of the weights the tiled kernels never store.
//   8. Reductions that a GPT step makes long: a whole tensor's sum (gradient clipping takes one
//      per parameter; 2^25 elements is GPT-2's token embedding), the column sums of a
//      [16384, 768] gradient, and LayerNorm's weight gradients at that shape (Note [Split
//      reductions], cuda_kernels/reduce.cu; cuda_kernels/layer_norm.cu), and the token
//      embedding's backward (index_add of 8192 rows, cuda_kernels/index_add.cu): GB/s of the
//      bytes read and as % of the copy's.
// Ends with SUMMARY lines (tools/gpu/check.sh collects them): the goal for ReLU, BatchNorm and
// Adam is at least 70 % of the copy's bandwidth at the largest size.
//
// Usage: cuda_bench [iterations]   (default 20, after 3 warm-up runs; times from CUDA events on
// one created stream). Prints Markdown tables for docs/BENCHMARKS.md. Exits 1 without a GPU.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_kernels/attention_mma.h"
#include "cuda_kernels/blas.h"
#include "cuda_kernels/check.h"
#include "tensor/generator.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "tensor/stream.h"
#include "tensor/tensor.h"

// cuDNN's status, checked like PW_CUDA_CHECK does the runtime's (the library has no cuDNN).
#define CUDNN_CHECK(expr)                                                                   \
  do {                                                                                      \
    const cudnnStatus_t status_ = (expr);                                                   \
    if (status_ != CUDNN_STATUS_SUCCESS) {                                                  \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +    \
                               ": " #expr " failed: " + cudnnGetErrorString(status_));      \
    }                                                                                       \
  } while (0)

// The legacy BatchNorm API is deprecated in cuDNN 9 but is what cuDNN users call; it is the
// fair comparison for a hand-written BatchNorm.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace pipewright {
namespace {

int g_iterations = 20;
const Device kGpu = Device::cuda(0);
double g_copy_gbs = 0;  // the device-to-device copy's bandwidth, GB/s (bench_copy)

double percent_of_copy(double gbs) { return g_copy_gbs > 0 ? 100.0 * gbs / g_copy_gbs : 0.0; }

/// Mean milliseconds of `fn` over g_iterations, after 3 warm-ups, on the current stream.
double time_ms(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  Event start(kGpu, /*timing=*/true), end(kGpu, /*timing=*/true);
  start.record();
  for (int i = 0; i < g_iterations; ++i) fn();
  end.record();
  end.synchronize();
  return static_cast<double>(start.elapsed_ms(end)) / g_iterations;
}

Tensor random_gpu(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, {DType::kFloat32, kGpu});
  Generator(seed).uniform_(t, -1.0, 1.0);
  return t;
}

const Kernels& gpu() { return kernels_for(DeviceType::kCUDA); }

void bench_gemm(cudaStream_t stream) {
  std::printf("\n### GEMM float32, C = A·B (square)\n\n");
  std::printf("| n | ours FP32 ms | raw cuBLAS FP32 ms | ours TFLOP/s | ours TF32 ms | raw TF32 ms |\n");
  std::printf("|---|---|---|---|---|---|\n");
  cublasHandle_t raw = nullptr;
  PW_CUDA_CHECK(cublasCreate(&raw));
  PW_CUDA_CHECK(cublasSetStream(raw, stream));
  for (int n : {1024, 2048, 4096, 8192}) {
    const Tensor a = random_gpu({n, n}, 1), b = random_gpu({n, n}, 2);
    Tensor c = Tensor::empty({n, n}, {DType::kFloat32, kGpu});
    const float one = 1.0f, zero = 0.0f;
    auto ours = [&] { gpu().gemm(false, false, 1.0, a, b, 0.0, c); };
    auto raw_call = [&] {
      PW_CUDA_CHECK(cublasSgemm(raw, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b.data<float>(), n,
                                a.data<float>(), n, &zero, c.data<float>(), n));
    };
    PW_CUDA_CHECK(cublasSetMathMode(raw, CUBLAS_DEFAULT_MATH));
    const double ours_ms = time_ms(ours), raw_ms = time_ms(raw_call);
    cuda::set_allow_tf32(true);
    PW_CUDA_CHECK(cublasSetMathMode(raw, CUBLAS_TF32_TENSOR_OP_MATH));
    const double ours_tf32 = time_ms(ours), raw_tf32 = time_ms(raw_call);
    cuda::set_allow_tf32(false);
    const double flops = 2.0 * n * static_cast<double>(n) * n;
    std::printf("| %d | %.3f | %.3f | %.1f | %.3f | %.3f |\n", n, ours_ms, raw_ms,
                flops / (ours_ms * 1e-3) / 1e12, ours_tf32, raw_tf32);
  }
  PW_CUDA_CHECK(cublasDestroy(raw));
}

void bench_copy(cudaStream_t stream) {
  const int64_t n = int64_t{1} << 26;  // 256 MiB of float32
  const Tensor x = random_gpu({n}, 6);
  Tensor y = Tensor::empty({n}, {DType::kFloat32, kGpu});
  const size_t bytes = static_cast<size_t>(n) * 4;
  const double ms = time_ms([&] {
    PW_CUDA_CHECK(cudaMemcpyAsync(y.raw_data(), x.raw_data(), bytes, cudaMemcpyDeviceToDevice,
                                  stream));
  });
  g_copy_gbs = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  std::printf("\n### Device-to-device copy, 256 MiB\n\n%.3f ms, %.0f GB/s (read + write)\n", ms,
              g_copy_gbs);
  std::printf("SUMMARY copy: %.0f GB/s device to device (read + write)\n", g_copy_gbs);
}

void bench_relu() {
  std::printf("\n### ReLU float32 (unary kernel)\n\n| elements | ms | GB/s (read + write) | %% of copy |\n|---|---|---|---|\n");
  double last = 0;
  for (int64_t n : {int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 28}) {
    const Tensor x = random_gpu({n}, 3);
    Tensor y = Tensor::empty({n}, {DType::kFloat32, kGpu});
    const double ms = time_ms([&] { gpu().unary(UnaryOp::kRelu, x, y); });
    last = 2.0 * 4.0 * static_cast<double>(n) / (ms * 1e-3) / 1e9;
    std::printf("| %lld | %.4f | %.0f | %.0f |\n", static_cast<long long>(n), ms, last,
                percent_of_copy(last));
  }
  std::printf("SUMMARY ReLU: %.0f%% of the copy's bandwidth at 2^28 elements (goal >= 70%%)\n",
              percent_of_copy(last));
}

void bench_adam() {
  std::printf("\n### Adam float32 (fused step)\n\n| elements | ms | GB/s (7 x 4 B per element) | %% of copy |\n|---|---|---|---|\n");
  double last = 0;
  for (int64_t n : {int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 26}) {
    Tensor p = random_gpu({n}, 7), m = random_gpu({n}, 8), v = random_gpu({n}, 9);
    const Tensor g = random_gpu({n}, 10);
    v = Tensor::ones({n}, {DType::kFloat32, kGpu});  // a valid second moment
    int64_t step = 1;
    const double ms = time_ms([&] {
      gpu().adam_step(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.0, false, step++);
    });
    last = 7.0 * 4.0 * static_cast<double>(n) / (ms * 1e-3) / 1e9;
    std::printf("| %lld | %.4f | %.0f | %.0f |\n", static_cast<long long>(n), ms, last,
                percent_of_copy(last));
  }
  std::printf("SUMMARY Adam: %.0f%% of the copy's bandwidth at 2^26 elements (goal >= 70%%)\n",
              percent_of_copy(last));
}

/// cuDNN descriptors for x viewed as [N, C, L, 1] and its [1, C, 1, 1] parameters.
struct CudnnBn {
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  cudnnBatchNormMode_t mode;
  CudnnBn(cudaStream_t stream, int64_t n, int64_t c, int64_t l) {
    CUDNN_CHECK(cudnnCreate(&handle));
    CUDNN_CHECK(cudnnSetStream(handle, stream));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&param));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                             static_cast<int>(n), static_cast<int>(c),
                                             static_cast<int>(l), 1));
    // [N, C]: per-activation over N equals per-channel; [N, C, L]: spatial.
    mode = l == 1 ? CUDNN_BATCHNORM_PER_ACTIVATION : CUDNN_BATCHNORM_SPATIAL;
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param, x, mode));
  }
  ~CudnnBn() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(param);
    cudnnDestroy(handle);
  }
};

void bench_batch_norm(cudaStream_t stream) {
  std::printf("\n### BatchNorm float32, training forward + backward\n\n");
  std::printf("| shape [N, C, L] | ours fwd ms | cuDNN fwd ms | ours bwd ms | cuDNN bwd ms | ours fwd GB/s | fwd %% of copy | bwd %% of copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  double last_fwd = 0, last_bwd = 0;
  struct S { int64_t n, c, l; };
  for (S s : {S{256, 1024, 1}, S{4096, 1024, 1}, S{64, 256, 784}, S{32, 64, 12544}}) {
    const Shape xs{s.n, s.c, s.l};
    const Tensor x = random_gpu(xs, 4), g = random_gpu(xs, 5);
    const Tensor gamma = Tensor::ones({s.c}, {DType::kFloat32, kGpu});
    const Tensor beta = Tensor::zeros({s.c}, {DType::kFloat32, kGpu});
    Tensor y = Tensor::empty(xs, {DType::kFloat32, kGpu}), gx = Tensor::empty(xs, {DType::kFloat32, kGpu});
    Tensor mean = Tensor::empty({s.c}, {DType::kFloat32, kGpu}), invstd = mean.clone();
    Tensor gg = mean.clone(), gb = mean.clone(), rm = Tensor::zeros({s.c}, {DType::kFloat32, kGpu}),
           rv = Tensor::ones({s.c}, {DType::kFloat32, kGpu});
    Tensor var = Tensor::empty({s.c}, {DType::kFloat64, kGpu});  // for the running statistics
    const double ours_fwd = time_ms([&] {
      gpu().batch_norm_train(x, gamma, beta, 1e-5, s.n, s.c, s.l, y, mean, invstd, var);
    });
    const double ours_bwd = time_ms([&] {
      gpu().batch_norm_backward(g, x, gamma, mean, invstd, s.n, s.c, s.l, gx, gg, gb);
    });
    CudnnBn bn(stream, s.n, s.c, s.l);
    const float one = 1.0f, zero = 0.0f;
    const double cudnn_fwd = time_ms([&] {
      CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          bn.handle, bn.mode, &one, &zero, bn.x, x.data<float>(), bn.x, y.data<float>(), bn.param,
          gamma.data<float>(), beta.data<float>(), 0.1, rm.data<float>(), rv.data<float>(), 1e-5,
          mean.data<float>(), invstd.data<float>()));
    });
    const double cudnn_bwd = time_ms([&] {
      CUDNN_CHECK(cudnnBatchNormalizationBackward(
          bn.handle, bn.mode, &one, &zero, &one, &zero, bn.x, x.data<float>(), bn.x,
          g.data<float>(), bn.x, gx.data<float>(), bn.param, gamma.data<float>(),
          gg.data<float>(), gb.data<float>(), 1e-5, mean.data<float>(), invstd.data<float>()));
    });
    // Minimum traffic: forward reads x and writes y, backward reads g and x and writes gx
    // (4 bytes each).
    const double elements = static_cast<double>(s.n * s.c * s.l);
    last_fwd = 2.0 * 4.0 * elements / (ours_fwd * 1e-3) / 1e9;
    last_bwd = 3.0 * 4.0 * elements / (ours_bwd * 1e-3) / 1e9;
    std::printf("| [%lld, %lld, %lld] | %.4f | %.4f | %.4f | %.4f | %.0f | %.0f | %.0f |\n",
                static_cast<long long>(s.n), static_cast<long long>(s.c),
                static_cast<long long>(s.l), ours_fwd, cudnn_fwd, ours_bwd, cudnn_bwd, last_fwd,
                percent_of_copy(last_fwd), percent_of_copy(last_bwd));
  }
  std::printf("SUMMARY BatchNorm [32, 64, 12544]: forward %.0f%%, backward %.0f%% of the copy's "
              "bandwidth (goal >= 70%%)\n",
              percent_of_copy(last_fwd), percent_of_copy(last_bwd));
}

/// Median host microseconds per call of `fn`: 7 batches of 500 calls, each timed on the host
/// without waiting for the device, the device drained between batches (so a full launch queue
/// never makes the host wait inside a batch).
double host_us(const std::function<void()>& fn) {
  constexpr int kBatches = 7, kCalls = 500;
  for (int i = 0; i < 50; ++i) fn();
  PW_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> us;
  for (int b = 0; b < kBatches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    PW_CUDA_CHECK(cudaDeviceSynchronize());
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
  }
  std::sort(us.begin(), us.end());
  return us[kBatches / 2];
}

void bench_host_cost(cudaStream_t stream) {
  std::printf("\n### Host cost per call (median of 7 batches of 500 calls, device drained "
              "between batches)\n\n");
  std::printf("| call | host µs per call |\n|---|---|\n");
  cudaEvent_t event = nullptr;
  PW_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  Tensor one = Tensor::empty({1}, {DType::kFloat32, kGpu});
  const Tensor a = random_gpu({64, 64}, 7), b = random_gpu({64, 64}, 8);
  Tensor c = Tensor::empty({64, 64}, {DType::kFloat32, kGpu});
  cublasHandle_t raw = nullptr;
  PW_CUDA_CHECK(cublasCreate(&raw));
  PW_CUDA_CHECK(cublasSetStream(raw, stream));
  const float f_one = 1.0f, f_zero = 0.0f;
  const Tensor x = random_gpu({64, 512}, 9), y = random_gpu({64, 512}, 10);
  const Tensor batch = Tensor::ones({64, 784}, {DType::kFloat32, Device::cpu()});
  struct Row {
    const char* what;
    std::function<void()> fn;
  };
  const Row rows[] = {
      {"cudaEventRecord (raw)", [&] { PW_CUDA_CHECK(cudaEventRecord(event, stream)); }},
      {"one-element fill through the kernel table", [&] { gpu().fill(one, 1.0); }},
      {"GEMM 64x64x64 through the kernel table",
       [&] { gpu().gemm(false, false, 1.0, a, b, 0.0, c); }},
      {"cublasSgemm 64x64x64 (raw)",
       [&] {
         PW_CUDA_CHECK(cublasSgemm(raw, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &f_one,
                                   b.data<float>(), 64, a.data<float>(), 64, &f_zero,
                                   c.data<float>(), 64));
       }},
      {"ops::add of two [64, 512] (allocation + dispatch + launch)", [&] { (void)ops::add(x, y); }},
      {"[64, 784] host to device (Tensor::to, pinned staging)", [&] { (void)batch.to(kGpu); }},
  };
  std::vector<double> us;
  for (const Row& row : rows) {
    us.push_back(host_us(row.fn));
    std::printf("| %s | %.2f |\n", row.what, us.back());
  }
  // The device's side: tiny kernels back to back, timed by events.
  const double device_us = 1e3 * time_ms([&] {
    for (int i = 0; i < 100; ++i) gpu().fill(one, 1.0);
  }) / 100;
  std::printf("| (device) one-element fill kernels back to back, device µs each | %.2f |\n",
              device_us);
  std::printf("SUMMARY host: %.2f µs per kernel-table launch, %.2f µs per small GEMM, device "
              "%.2f µs per tiny kernel\n",
              us[1], us[2], device_us);  // the rows above: kernel-table fill, GEMM
  PW_CUDA_CHECK(cublasDestroy(raw));
  PW_CUDA_CHECK(cudaEventDestroy(event));
}

void bench_attention() {
  std::printf("\n### Causal attention, N = 96 heads, D = 64 (forward + backward)\n\n");
  std::printf("| T | path | inputs | forward ms | backward ms | TFLOP/s | [N, T, T] bytes stored |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  const int64_t n = 96, d = 64;
  const double scale = 0.125;
  double last_ratio = 0, tiled_mma_ms = 0, tiled_cores_ms = 0, unfused_16_ms = 0;
  for (int64_t t : {int64_t{1024}, int64_t{2048}}) {
    const double flops = 4.0 * n * static_cast<double>(t) * t * d * 0.5 * 3.5;
    const Tensor q32 = random_gpu({n, t, d}, 11), k32 = random_gpu({n, t, d}, 12),
                 v32 = random_gpu({n, t, d}, 13), g32 = random_gpu({n, t, d}, 14);
    const TensorOptions f32{DType::kFloat32, kGpu};
    double flash_fp32_ms = 0, unfused_fp32_ms = 0;
    for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
      const Tensor q = q32.to(dtype), k = k32.to(dtype), v = v32.to(dtype), g = g32.to(dtype);
      Tensor out = Tensor::empty({n, t, d}, f32), lse = Tensor::empty({n, t}, f32);
      Tensor gq = Tensor::empty({n, t, d}, f32), gk = Tensor::empty({n, t, d}, f32),
             gv = Tensor::empty({n, t, d}, f32);
      // 16-bit inputs: the tensor-core kernels (attention_mma.cu), then the CUDA-core ones.
      for (bool tensor_cores : {true, false}) {
        if (dtype == DType::kFloat32 && !tensor_cores) continue;
        double fwd = 0, bwd = 0;
        {
          cuda::ScopedAttentionTensorCores scoped(tensor_cores);
          fwd = time_ms([&] { gpu().flash_attention(q, k, v, scale, true, out, lse); });
          bwd = time_ms([&] {
            gpu().flash_attention_backward(q, k, v, out, g, lse, scale, true, gq, gk, gv);
          });
        }
        const bool mma = tensor_cores && cuda::tensor_core_attention_applies(dtype, d);
        std::printf("| %lld | tiled, %s | %s | %.3f | %.3f | %.1f | 0 |\n",
                    static_cast<long long>(t), mma ? "tensor cores" : "CUDA cores",
                    dtype_name(dtype), fwd, bwd, flops / ((fwd + bwd) * 1e-3) / 1e12);
        if (dtype == DType::kFloat32) flash_fp32_ms = fwd + bwd;
        if (dtype != DType::kFloat32) (mma ? tiled_mma_ms : tiled_cores_ms) = fwd + bwd;
      }

      // The unfused path: s = q·kᵀ, p = causal_softmax(s), out = p·v; backward dp = g·vᵀ,
      // dv = pᵀ·g, ds = softmax backward, dq = ds·k, dk = dsᵀ·q (16-bit operands rounded
      // as the precision policy rounds them).
      Tensor s = Tensor::empty({n, t, t}, f32), p = Tensor::empty({n, t, t}, f32);
      Tensor dp = Tensor::empty({n, t, t}, f32), ds = Tensor::empty({n, t, t}, f32);
      auto operand = [&](const Tensor& x) { return dtype == DType::kFloat32 ? x : x.to(dtype); };
      const double ufwd = time_ms([&] {
        gpu().gemm_batched(false, true, 1.0, q, k, 0.0, s);
        gpu().causal_softmax(s, scale, p);
        gpu().gemm_batched(false, false, 1.0, operand(p), v, 0.0, out);
      });
      const double ubwd = time_ms([&] {
        gpu().gemm_batched(false, true, 1.0, g, v, 0.0, dp);
        gpu().gemm_batched(true, false, 1.0, operand(p), g, 0.0, gv);
        gpu().causal_softmax_backward(dp, p, scale, ds);
        const Tensor ds_op = operand(ds);
        gpu().gemm_batched(false, false, 1.0, ds_op, k, 0.0, gq);
        gpu().gemm_batched(true, false, 1.0, ds_op, q, 0.0, gk);
      });
      std::printf("| %lld | unfused | %s | %.3f | %.3f | %.1f | %lld |\n",
                  static_cast<long long>(t), dtype_name(dtype), ufwd, ubwd,
                  flops / ((ufwd + ubwd) * 1e-3) / 1e12, static_cast<long long>(n * t * t * 4));
      if (dtype == DType::kFloat32) unfused_fp32_ms = ufwd + ubwd;
      if (dtype != DType::kFloat32) unfused_16_ms = ufwd + ubwd;
    }
    last_ratio = unfused_fp32_ms / flash_fp32_ms;
  }
  std::printf("SUMMARY attention: tiled float32 %.2fx the unfused path's speed at T = 2048 "
              "(> 1: tiled faster), without its [N, T, T] tensors\n", last_ratio);
  std::printf("SUMMARY attention bf16 at T = 2048: tensor-core kernels %.2fx the CUDA-core "
              "ones, %.2fx the unfused path (cuBLAS)\n",
              tiled_cores_ms / tiled_mma_ms, unfused_16_ms / tiled_mma_ms);
}

void bench_reductions() {
  std::printf("\n### Long reductions float32 (split over the GPU)\n\n| reduction | ms | GB/s (bytes read) | %% of copy |\n|---|---|---|---|\n");
  const auto row = [](const char* what, double ms, double bytes) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("| %s | %.4f | %.0f | %.0f |\n", what, ms, gbs, percent_of_copy(gbs));
    return percent_of_copy(gbs);
  };
  const int64_t n = int64_t{1} << 25, rows = 16384, cols = 768;
  const Tensor big = random_gpu({n}, 31);
  Tensor total = Tensor::empty({1, 1}, {DType::kFloat32, kGpu});
  const double whole = row("sum of 2^25 elements", time_ms([&] {
    gpu().reduce(ReduceOp::kSum, big, 1, n, 1, total);
  }), 4.0 * static_cast<double>(n));
  const Tensor g = random_gpu({rows, cols}, 32), x = random_gpu({rows, cols}, 33);
  Tensor column = Tensor::empty({1, cols}, {DType::kFloat32, kGpu});
  const double columns = row("column sums of [16384, 768]", time_ms([&] {
    gpu().reduce(ReduceOp::kSum, g, 1, rows, cols, column);
  }), 4.0 * static_cast<double>(rows * cols));
  const Tensor mean = random_gpu({rows}, 34);
  const Tensor rstd = Tensor::ones({rows}, {DType::kFloat32, kGpu});
  Tensor none, gw = Tensor::empty({cols}, {DType::kFloat32, kGpu});
  Tensor gb = Tensor::empty({cols}, {DType::kFloat32, kGpu});
  const double norm = row("LayerNorm weight gradients, [16384, 768]", time_ms([&] {
    gpu().layer_norm_backward(g, x, Tensor(), mean, rstd, false, none, gw, gb);
  }), 8.0 * static_cast<double>(rows * cols));
  // The token embedding's backward: 8192 rows of 768 added into a [V, 768] gradient by index
  // (each row read once; V = 114, the char GPT's vocabulary, and 50304, GPT-2's).
  const Tensor src = random_gpu({8192, cols}, 35);
  double embedding = 0;
  for (const int64_t vocab : {int64_t{114}, int64_t{50304}}) {
    std::vector<int64_t> ids(8192);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7919) % vocab;
    const Tensor index = Tensor::from_vector<int64_t>(ids).to(kGpu);
    Tensor dst = Tensor::zeros({vocab, cols}, {DType::kFloat32, kGpu});
    const std::string what = "index_add of [8192, 768] into [" + std::to_string(vocab) + ", 768]";
    embedding = row(what.c_str(), time_ms([&] { gpu().index_add(dst, index, src); }),
                    4.0 * static_cast<double>(8192 * cols));
  }
  std::printf("SUMMARY reductions: %.0f%% of the copy's bandwidth for a whole sum of 2^25, %.0f%% "
              "for [16384, 768]'s column sums, %.0f%% for LayerNorm's weight gradients there, "
              "%.0f%% for the embedding's index_add at V = 50304 (source bytes)\n",
              whole, columns, norm, embedding);
}

}  // namespace
}  // namespace pipewright

int main(int argc, char** argv) {
  using namespace pipewright;
  if (argc > 1) g_iterations = std::max(1, std::atoi(argv[1]));
  try {
    if (device_count(DeviceType::kCUDA) == 0) {
      std::fprintf(stderr, "cuda_bench: no GPU\n");
      return 1;
    }
    cudaDeviceProp prop{};
    PW_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("## CUDA benchmark: %s, %d SMs, %d iterations per timing\n", prop.name,
                prop.multiProcessorCount, g_iterations);
    const Stream stream = Stream::create(kGpu);
    StreamGuard guard(stream);
    auto* s = static_cast<cudaStream_t>(stream.handle());
    bench_copy(s);
    bench_gemm(s);
    bench_relu();
    bench_batch_norm(s);
    bench_adam();
    bench_host_cost(s);
    bench_attention();
    bench_reductions();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
