#include "distributed/gradient_buckets.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "distributed/mpi.h"
#include "distributed/mpi_tensor.h"
#include "distributed/nccl.h"
#include "nn/sequential.h"
#include "tensor/ops.h"
#include "tensor/stream.h"

namespace pipewright::distributed {

/// One all-reduce in flight: gradients of one dtype, packed in parameter order.
struct GradientBuckets::Bucket {
  DType dtype = DType::kFloat32;
  std::vector<Tensor> grads;  // handles of the .grad tensors the sums go back to
  std::vector<char> buffer;
  MPI_Request request = MPI_REQUEST_NULL;
  int stage = 0;
};

/// A stage's CUDA gradients of one dtype, packed into one device buffer summed by NCCL.
struct GradientBuckets::DeviceBucket {
  Tensor flat;
  std::vector<Tensor> grads;
};

GradientBuckets::GradientBuckets(MPI_Comm stage_comm, size_t bucket_bytes, double scale,
                                 WaitFn wait_for)
    : stage_comm_(stage_comm),
      bucket_bytes_(bucket_bytes),
      scale_(scale),
      wait_for_(std::move(wait_for)) {}

GradientBuckets::~GradientBuckets() {
  // Buckets still pending belong to a failed step: MPI may still use their buffers, and a
  // non-blocking collective's request cannot be freed, so they are leaked on purpose.
  for (auto& b : abandoned_) {
    if (b->request != MPI_REQUEST_NULL) (void)b.release();
  }
}

// With NCCL: per dtype, the stage's gradients are copied into one flat buffer on their
// device, weighted, summed in place by ncclAllReduce, all on the worker's current stream;
// finish() copies the sums back on the same stream (no host wait anywhere).
void GradientBuckets::reduce_on_device(const std::vector<Tensor>& grads) {
  const Device device = grads.front().device();
  if (nccl_ == nullptr) nccl_ = std::make_unique<NcclGroup>(stage_comm_, device);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    DeviceBucket bucket;
    int64_t total = 0;
    for (const Tensor& g : grads) {
      if (g.dtype() != dtype) continue;
      bucket.grads.push_back(g);
      total += g.numel();
    }
    if (bucket.grads.empty()) continue;
    bucket.flat = Tensor::empty({total}, {dtype, device});
    int64_t offset = 0;
    for (const Tensor& g : bucket.grads) {
      Tensor slot = bucket.flat.slice(offset, offset + g.numel());
      slot.copy_from(g.contiguous().reshape({g.numel()}));
      offset += g.numel();
    }
    ops::mul_(bucket.flat, scale_);
    nccl_->all_reduce_sum(bucket.flat, Stream::current(device));
    pending_device_.push_back(std::move(bucket));
  }
}

// Note [Data-parallel gradients] (mpi_processes.h): pack, weight, start.
void GradientBuckets::start(int stage, nn::Sequential& partition) {
  if (nccl_available()) {
    std::vector<Tensor> on_gpu;
    for (const Tensor& p : partition.parameters()) {
      if (p.grad().defined() && p.grad().device().is_cuda()) on_gpu.push_back(p.grad());
    }
    if (!on_gpu.empty()) {
      reduce_on_device(on_gpu);
      return;  // a stage lives on one device: every gradient was on the GPU
    }
  }
  std::unique_ptr<Bucket> bucket;
  auto start = [&] {
    if (bucket == nullptr) return;
    check(MPI_Iallreduce(MPI_IN_PLACE, bucket->buffer.data(),
                         static_cast<int>(bucket->buffer.size() / element_size(bucket->dtype)),
                         mpi_type(bucket->dtype), MPI_SUM, stage_comm_, &bucket->request),
          "MPI_Iallreduce (gradients)");
    pending_.push_back(std::move(bucket));
  };
  for (const Tensor& p : partition.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;  // the same on every replica: same model, same schedule
    if (bucket != nullptr &&
        (bucket->dtype != g.dtype() || bucket->buffer.size() >= bucket_bytes_)) {
      start();
    }
    if (bucket == nullptr) {
      bucket = std::make_unique<Bucket>();
      bucket->dtype = g.dtype();
      bucket->stage = stage;
    }
    const Tensor host = on_host(g);
    const size_t offset = bucket->buffer.size();
    bucket->buffer.resize(offset + host.nbytes());
    char* out = bucket->buffer.data() + offset;
    const int64_t n = host.numel();
    if (g.dtype() == DType::kFloat32) {
      const auto* in = static_cast<const float*>(host.raw_data());
      auto* o = reinterpret_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(in[i] * scale_);
    } else if (g.dtype() == DType::kFloat64) {
      const auto* in = static_cast<const double*>(host.raw_data());
      auto* o = reinterpret_cast<double*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = in[i] * scale_;
    } else {
      throw std::invalid_argument("MpiProcesses: a gradient of dtype " +
                                  std::string(dtype_name(g.dtype())) + " cannot be averaged");
    }
    bucket->grads.push_back(g);
  }
  start();
}

void GradientBuckets::abandon() {
  // The reductions started stay in flight: their buffers are kept (see ~GradientBuckets).
  for (auto& b : pending_) abandoned_.push_back(std::move(b));
  pending_.clear();
  pending_device_.clear();
}

void GradientBuckets::finish() {
  for (DeviceBucket& b : pending_device_) {
    int64_t offset = 0;
    for (Tensor& g : b.grads) {
      g.copy_from(b.flat.slice(offset, offset + g.numel()).reshape(g.shape()));
      offset += g.numel();
    }
  }
  pending_device_.clear();
  std::vector<std::unique_ptr<Bucket>> buckets;
  buckets.swap(pending_);
  for (size_t i = 0; i < buckets.size(); ++i) {
    Bucket& b = *buckets[i];
    try {
      wait_for_(b.request, "all-reduce of stage " + std::to_string(b.stage) + "'s gradients");
    } catch (...) {
      for (size_t k = i; k < buckets.size(); ++k) abandoned_.push_back(std::move(buckets[k]));
      throw;
    }
    const char* in = b.buffer.data();
    for (Tensor& g : b.grads) {
      Tensor host = Tensor::empty(g.shape(), {g.dtype(), Device::cpu(0)});
      std::memcpy(host.raw_data(), in, host.nbytes());
      in += host.nbytes();
      g.copy_from(host);
    }
  }
}

}  // namespace pipewright::distributed
