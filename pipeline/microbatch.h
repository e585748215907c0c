// Micro-batching: split a mini-batch into micro-batches and put the pieces back together.
//
// torchgpipe's microbatch.py semantics:
//   - every chunked input is split on dim 0 with Tensor::chunk (torch.chunk): `chunks`
//     pieces of ceil(N / chunks) rows, the last one smaller, never an empty piece, so a small
//     batch yields fewer micro-batches (N 7, chunks 4 -> 2,2,2,1; N 2, chunks 4 -> 1,1);
//   - an input flagged no_chunk (torchgpipe's NoChunk) goes whole to every micro-batch;
//   - outputs are gathered by concatenating each output position on dim 0.
// Micro-batches are views (Tensor::chunk): splitting costs no copy.
//
// Shapes: every chunked input is [N, ...] with the same N; micro-batch j of it is
// [sizes[j], ...] with Σ sizes = N.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::pipeline {

/// A tuple of tensors (the same type as nn::Tensors).
using Tensors = std::vector<Tensor>;

struct MicroBatches {
  std::vector<Tensors> batches;  // [micro-batch][input position]
  std::vector<int64_t> sizes;    // rows of each micro-batch (the chunked inputs' dim 0)
  int64_t batch_size = 0;        // N

  int count() const { return static_cast<int>(batches.size()); }
};

/// Splits `inputs` into at most `chunks` micro-batches. `no_chunk` is empty (chunk all) or
/// has one flag per input. Throws std::invalid_argument when chunks <= 0, inputs is empty,
/// no_chunk has the wrong size, no input is chunked, a chunked input is undefined or rank 0,
/// or two chunked inputs differ in dim 0 (naming both shapes).
MicroBatches scatter(const Tensors& inputs, const std::vector<bool>& no_chunk, int chunks);

/// Concatenates output position k of every micro-batch on dim 0. All micro-batches must
/// have the same number of outputs, each of rank >= 1 (else std::invalid_argument naming the
/// micro-batch and position).
Tensors gather(const std::vector<Tensors>& outputs);

/// Rows of `t` cut into consecutive slices of `sizes` (views). An undefined `t` gives
/// undefined slices. Throws std::invalid_argument when Σ sizes != t.size(0).
std::vector<Tensor> split_rows(const Tensor& t, const std::vector<int64_t>& sizes);

/// What the backward needs to know about an original input (without keeping it alive).
struct InputInfo {
  Shape shape;
  TensorOptions options;    // dtype and device
  bool replicated = false;  // no_chunk
  bool requires_grad = false;
};
std::vector<InputInfo> describe_inputs(const Tensors& inputs,
                                       const std::vector<bool>& no_chunk);

/// The gradient of each original input from per-micro-batch input gradients
/// `grads[micro-batch][position]`, on the input's device: concatenated on dim 0 for chunked
/// inputs, summed for replicated ones (every micro-batch used the whole tensor). Undefined
/// where no micro-batch produced a gradient; a micro-batch that produced none contributes
/// zeros. `sizes` are the micro-batch row counts.
Tensors gather_input_grads(const std::vector<Tensors>& grads,
                               const std::vector<InputInfo>& inputs,
                               const std::vector<int64_t>& sizes);

}  // namespace pipewright::pipeline
