// Micro-batching: split a mini-batch into micro-batches and put the pieces back together.
//
// torchgpipe's microbatch.py semantics, with torch.distributed.pipelining's choice of dim:
//   - every chunked input is split on its dim (ChunkSpec::split(d), dim 0 by default) like
//     torch.chunk: `chunks` pieces of ceil(N / chunks) entries, the last one smaller, never an
//     empty piece, so a small batch yields fewer micro-batches (N 7, chunks 4 -> 2,2,2,1;
//     N 2, chunks 4 -> 1,1);
//   - a replicated input (ChunkSpec::replicate(), torchgpipe's NoChunk, torch's _Replicate)
//     goes whole to every micro-batch;
//   - outputs are gathered by concatenating each output position on its dim (0 by default).
// Pieces on dim 0 are views (Tensor::chunk): splitting costs no copy. Pieces on another dim
// are contiguous copies (the layout has no strided views), as are gathered outputs.
//
// Shapes: every chunked input has the same size N on its split dim; micro-batch j of it has
// sizes[j] there, with Σ sizes = N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/tensors.h"
#include "tensor/tensor.h"

namespace pipewright::pipeline {

/// How one tensor of a step is cut into micro-batches: split on `dim` (negative counts from
/// the end, as in PyTorch) or replicated whole into each.
struct ChunkSpec {
  int dim = 0;
  bool replicated = false;

  static ChunkSpec split(int dim = 0) { return {dim, false}; }
  static ChunkSpec replicate() { return {0, true}; }
  friend bool operator==(const ChunkSpec&, const ChunkSpec&) = default;
};

/// One spec per input: `specs` itself, or split(0) for each when empty. Throws
/// std::invalid_argument when non-empty with another size than `count` (naming `what`:
/// "input", "target").
std::vector<ChunkSpec> chunk_specs(const std::vector<ChunkSpec>& specs, size_t count,
                                   const std::string& what);

struct MicroBatches {
  std::vector<nn::Tensors> batches;  // [micro-batch][input position]
  std::vector<int64_t> sizes;    // each micro-batch's size on the split dims
  int64_t batch_size = 0;        // N

  int count() const { return static_cast<int>(batches.size()); }
};

/// Splits `inputs` into at most `chunks` micro-batches; specs as chunk_specs() (empty: every
/// input on dim 0). Throws std::invalid_argument when chunks <= 0, inputs is empty, specs has
/// the wrong size, no input is chunked, a chunked input is undefined, rank 0 or has no dim
/// `dim` (naming its shape and the dim), or two chunked inputs differ in size on their dims
/// (naming both shapes and dims). `what` names the tensors in messages ("input", "target").
MicroBatches scatter(const nn::Tensors& inputs, const std::vector<ChunkSpec>& specs, int chunks,
                     const std::string& what = "input");

/// Cuts every tensor of `tensors` into pieces of `sizes` on its spec's dim (replicated ones
/// whole into each piece): result [piece][position]. The targets of a step are cut this way,
/// to the sizes of its inputs' micro-batches. Throws std::invalid_argument when a split tensor
/// is undefined, has no such dim, or its size there is not Σ sizes (naming `what`, its
/// position and shape).
std::vector<nn::Tensors> split_to(const nn::Tensors& tensors, const std::vector<ChunkSpec>& specs,
                              const std::vector<int64_t>& sizes, const std::string& what);

/// Concatenates output position k of every micro-batch on dims[k] (dim 0 for all when
/// `dims` is empty; negative counts from the end). All micro-batches must have the same
/// number of outputs, each with that dim (else std::invalid_argument naming the micro-batch
/// and position).
nn::Tensors gather(const std::vector<nn::Tensors>& outputs, const std::vector<int>& dims = {});

/// `t` cut on `dim` (negative counts from the end) into consecutive pieces of `sizes` (torch.
/// split with sections): views on dim 0, contiguous copies on another. An undefined `t` gives
/// undefined pieces. Throws std::invalid_argument, naming the shape, when `t` has no such dim
/// or Σ sizes != t.size(dim).
nn::Tensors split_sections(const Tensor& t, const std::vector<int64_t>& sizes,
                                   int dim = 0);

/// What the backward needs to know about an original input (without keeping it alive).
struct InputInfo {
  Shape shape;
  TensorOptions options;    // dtype and device
  ChunkSpec chunk;          // how it was cut (dim normalised to >= 0)
  bool requires_grad = false;
};
/// `specs` as scatter() took them.
std::vector<InputInfo> describe_inputs(const nn::Tensors& inputs,
                                       const std::vector<ChunkSpec>& specs);

/// The gradient of each original input from per-micro-batch input gradients
/// `grads[micro-batch][position]`, on the input's device: concatenated on the split dim for
/// chunked inputs, summed for replicated ones (every micro-batch used the whole tensor).
/// Undefined where no micro-batch produced a gradient; a micro-batch that produced none
/// contributes zeros. `sizes` are the micro-batch sizes on the split dims.
nn::Tensors gather_input_grads(const std::vector<nn::Tensors>& grads,
                               const std::vector<InputInfo>& inputs,
                               const std::vector<int64_t>& sizes);

}  // namespace pipewright::pipeline
