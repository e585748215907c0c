// cuBLAS handles and the precision policy of the CUDA GEMM.
//
// A cuBLAS handle holds a stream and a workspace and must not be used by two threads at once.
// blas_handle() gives each (thread, device) its own handle, taken from a process-wide pool and
// returned to it when the thread exits (pipeline workers come and go; handles are costly to
// create and are never destroyed, which also keeps process exit free of cuBLAS teardown).
// Each (handle, stream) pair gets a workspace of its own (Note [One workspace per handle and
// stream], blas.cc), so no two streams ever share one, whoever held the handle before.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace pipewright::cuda {

/// The calling thread's cuBLAS handle for CUDA device `device_index`, bound to `stream` and
/// to the workspace of (handle, stream), allocated on first use. Call with that device
/// current (DeviceGuard). Throws CudaError if cuBLAS cannot start or the workspace cannot be
/// allocated (the message names its size and device).
cublasHandle_t blas_handle(int device_index, cudaStream_t stream);

/// The workspace of (h, stream) that blas_handle(device_index, stream) installed in h (for
/// calls that take a workspace themselves, as cublasLtMatmul does; work on it stays on
/// `stream`). Throws as blas_handle does.
void* blas_workspace(int device_index, cublasHandle_t h, cudaStream_t stream);

/// Whether gemm_bias adds the bias in cuBLASLt's epilogue (Note [The bias in the epilogue],
/// gemm.cc; default true) or through a broadcast copy and a GEMM with beta 1, the path it
/// takes anyway where cuBLASLt refuses. Process-wide; tests compare the two.
void set_bias_epilogue(bool enabled);
bool bias_epilogue();
/// What cuBLASLt said the first time it declined a GEMM with a bias epilogue in this process
/// (gemm_bias then took the broadcast path for that call, as it does for each one declined),
/// or "" when it never has: tests assert the epilogue ran.
std::string bias_epilogue_refusal();

/// Bytes of each (handle, stream) workspace: 32 MiB, what the cuBLAS documentation
/// (cublasSetWorkspace) recommends for Hopper, the architecture this build targets.
inline constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

/// Number of (handle, stream) workspaces allocated so far on all devices (tests).
size_t blas_workspace_count();

/// TF32 for float32 GEMMs (process-wide, default false): the same setting as
/// set_float32_matmul_precision (tensor/matmul_precision.h), true meaning kHigh, as
/// torch.backends.cuda.matmul.allow_tf32 is torch.set_float32_matmul_precision's "high".
///
/// false (default): cuBLAS's CUBLAS_DEFAULT_MATH, full float32 products and sums, so results
///   match the CPU to float32 rounding (about 1e-6 relative per accumulated term).
/// true: CUBLAS_TF32_TENSOR_OP_MATH, tensor cores with inputs rounded to 10 mantissa bits:
///   several times faster on Hopper, but only about 1e-3 relative accuracy. Opt in only where
///   that is acceptable (training large layers), never for tests against the CPU.
/// float64 GEMMs are unaffected. Takes effect at the next gemm on each thread.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace pipewright::cuda
