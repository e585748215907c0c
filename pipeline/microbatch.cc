#include "pipeline/microbatch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "pipeline/schedule/spec.h"
#include "tensor/ops.h"

namespace pipewright::pipeline {
namespace {

// dim in [-rank, rank) -> [0, rank), or std::invalid_argument naming the tensor.
int64_t normalised_dim(const Tensor& t, int dim, const std::string& name) {
  const int64_t rank = t.dim();
  const int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) {
    throw std::invalid_argument(name + " of shape " + t.shape().str() +
                                " has no dim " + std::to_string(dim) + " to split on" +
                                (rank == 0 ? " (a scalar: replicate it)" : ""));
  }
  return d;
}

// The product of the sizes of dims [begin, end).
int64_t extent(const Shape& shape, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

// Note [Splitting on another dim]
// Only dim-0 slices are views here. A contiguous tensor of shape [A.., n, B..] split on the
// dim of size n is, seen as a matrix [outer·n, inner] (outer = ΠA, inner = ΠB), `outer`
// blocks of n rows; a piece [start, start + k) of that dim is rows a·n + start ..
// a·n + start + k of every block a: `outer` dim-0 slices, concatenated into a copy. gather
// does the inverse, interleaving the pieces' blocks.
nn::Tensors split_on(const Tensor& t, int64_t dim, const std::vector<int64_t>& sizes) {
  nn::Tensors pieces;
  int64_t start = 0;
  if (dim == 0) {
    for (int64_t k : sizes) {
      pieces.push_back(t.slice(start, start + k));
      start += k;
    }
    return pieces;
  }
  const Shape& shape = t.shape();
  const int64_t outer = extent(shape, 0, dim), n = shape[dim];
  const int64_t inner = extent(shape, dim + 1, t.dim());
  const Tensor rows = t.contiguous().reshape(Shape{outer * n, inner});
  for (int64_t k : sizes) {
    nn::Tensors blocks;
    for (int64_t a = 0; a < outer; ++a) blocks.push_back(rows.slice(a * n + start, a * n + start + k));
    Shape piece = shape;
    piece.at(dim) = k;
    pieces.push_back((blocks.size() == 1 ? blocks[0].clone() : cat(blocks)).reshape(piece));
    start += k;
  }
  return pieces;
}

Tensor cat_on(const nn::Tensors& parts, int64_t dim) {
  if (dim == 0) return parts.size() == 1 ? parts[0].clone() : cat(parts);
  const Shape& shape = parts[0].shape();
  const int64_t outer = extent(shape, 0, dim), inner = extent(shape, dim + 1, parts[0].dim());
  nn::Tensors rows;
  int64_t total = 0;
  for (const Tensor& p : parts) {
    rows.push_back(p.contiguous().reshape(Shape{outer * p.size(dim), inner}));
    total += p.size(dim);
  }
  nn::Tensors blocks;
  for (int64_t a = 0; a < outer; ++a) {
    for (size_t j = 0; j < parts.size(); ++j) {
      const int64_t k = parts[j].size(dim);
      blocks.push_back(rows[j].slice(a * k, (a + 1) * k));
    }
  }
  Shape whole = shape;
  whole.at(dim) = total;
  return (blocks.size() == 1 ? blocks[0].clone() : cat(blocks)).reshape(whole);
}

}  // namespace

std::vector<ChunkSpec> chunk_specs(const std::vector<ChunkSpec>& specs, size_t count,
                                   const std::string& what) {
  if (specs.empty()) return std::vector<ChunkSpec>(count);
  if (specs.size() != count) {
    throw std::invalid_argument(std::to_string(specs.size()) + " chunk specs for " +
                                std::to_string(count) + " " + what + "s");
  }
  return specs;
}

MicroBatches scatter(const nn::Tensors& inputs, const std::vector<ChunkSpec>& given, int chunks,
                     const std::string& what) {
  if (chunks <= 0) {
    throw std::invalid_argument("number of chunks must be positive integer (chunks: " +
                                std::to_string(chunks) + ")");
  }
  if (inputs.empty()) throw std::invalid_argument("pipeline " + what + " is an empty tuple");
  const std::vector<ChunkSpec> specs = chunk_specs(given, inputs.size(), what);
  MicroBatches out;
  int first = -1;
  int64_t first_dim = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (specs[i].replicated) continue;
    const Tensor& t = inputs[i];
    const std::string name = "pipeline " + what + " " + std::to_string(i);
    if (!t.defined()) {
      throw std::invalid_argument(name + " is undefined: cannot split it into micro-batches");
    }
    if (t.dim() == 0) {
      throw std::invalid_argument(name + " is a scalar (shape []): cannot split it into "
                                  "micro-batches (replicate it: ChunkSpec::replicate())");
    }
    const int64_t d = normalised_dim(t, specs[i].dim, name);
    if (first < 0) {
      first = static_cast<int>(i);
      first_dim = d;
      out.batch_size = t.size(d);
    } else if (t.size(d) != out.batch_size) {
      throw std::invalid_argument(
          "pipeline " + what + "s differ in batch size (" + what + " " + std::to_string(first) +
          ": " + inputs[first].shape().str() + " on dim " + std::to_string(first_dim) + ", " +
          what + " " + std::to_string(i) + ": " + t.shape().str() + " on dim " +
          std::to_string(d) + ")");
    }
  }
  if (first < 0) {
    throw std::invalid_argument("every pipeline " + what + " is replicated "
                                "(ChunkSpec::replicate): nothing to split");
  }
  out.sizes = microbatch_sizes(out.batch_size, chunks);
  out.batches = split_to(inputs, specs, out.sizes, what);
  return out;
}

std::vector<nn::Tensors> split_to(const nn::Tensors& tensors, const std::vector<ChunkSpec>& given,
                              const std::vector<int64_t>& sizes, const std::string& what) {
  const std::vector<ChunkSpec> specs = chunk_specs(given, tensors.size(), what);
  int64_t total = 0;
  for (int64_t k : sizes) total += k;
  std::vector<nn::Tensors> pieces(sizes.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (specs[i].replicated) {
      for (nn::Tensors& piece : pieces) piece.push_back(t);
      continue;
    }
    const std::string name = what + " " + std::to_string(i);
    if (!t.defined()) throw std::invalid_argument(name + " is undefined: cannot split it");
    const int64_t d = normalised_dim(t, specs[i].dim, name);
    if (t.size(d) != total) {
      throw std::invalid_argument(name + " of shape " + t.shape().str() + " has " +
                                  std::to_string(t.size(d)) + " entries on dim " +
                                  std::to_string(d) + ", the batch has " +
                                  std::to_string(total));
    }
    nn::Tensors parts = split_on(t, d, sizes);
    for (size_t j = 0; j < sizes.size(); ++j) pieces[j].push_back(std::move(parts[j]));
  }
  return pieces;
}

nn::Tensors gather(const std::vector<nn::Tensors>& outputs, const std::vector<int>& dims) {
  if (outputs.empty()) return {};
  const size_t n = outputs[0].size();
  if (!dims.empty() && dims.size() != n) {
    throw std::invalid_argument(std::to_string(dims.size()) + " output dims for " +
                                std::to_string(n) + " outputs");
  }
  nn::Tensors gathered;
  for (size_t k = 0; k < n; ++k) {
    nn::Tensors parts;
    int64_t d = 0;
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (outputs[j].size() != n) {
        throw std::invalid_argument("micro-batch " + std::to_string(j) + " produced " +
                                    std::to_string(outputs[j].size()) +
                                    " outputs, micro-batch 0 produced " + std::to_string(n));
      }
      const Tensor& t = outputs[j][k];
      if (!t.defined() || t.dim() == 0) {
        throw std::invalid_argument("output " + std::to_string(k) + " of micro-batch " +
                                    std::to_string(j) + " cannot be concatenated (it is " +
                                    (t.defined() ? "a scalar" : "undefined") + ")");
      }
      d = normalised_dim(t, dims.empty() ? 0 : dims[k],
                         "output " + std::to_string(k) + " of micro-batch " + std::to_string(j));
      parts.push_back(t);
    }
    gathered.push_back(cat_on(parts, d));
  }
  return gathered;
}

nn::Tensors split_sections(const Tensor& t, const std::vector<int64_t>& sizes,
                                   int dim) {
  nn::Tensors out(sizes.size());
  if (!t.defined()) return out;
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  const int rank = static_cast<int>(t.dim());
  const int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank || t.size(d) != total) {
    throw std::invalid_argument("cannot split a gradient of shape " + t.shape().str() +
                                " on dim " + std::to_string(dim) + " into micro-batches of " +
                                std::to_string(total) + " entries");
  }
  return split_on(t, d, sizes);
}

std::vector<InputInfo> describe_inputs(const nn::Tensors& inputs,
                                       const std::vector<ChunkSpec>& given) {
  const std::vector<ChunkSpec> specs = chunk_specs(given, inputs.size(), "input");
  std::vector<InputInfo> infos;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    InputInfo info;
    info.chunk = specs[i];
    if (t.defined()) {
      info.shape = t.shape();
      info.options = {t.dtype(), t.device()};
      info.requires_grad = t.requires_grad();
      if (!info.chunk.replicated && info.chunk.dim < 0) info.chunk.dim += t.dim();
    }
    infos.push_back(std::move(info));
  }
  return infos;
}

nn::Tensors gather_input_grads(const std::vector<nn::Tensors>& grads,
                               const std::vector<InputInfo>& inputs,
                               const std::vector<int64_t>& sizes) {
  nn::Tensors out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool any = false;
    for (const nn::Tensors& g : grads) any = any || (i < g.size() && g[i].defined());
    if (!any) continue;
    const TensorOptions& options = inputs[i].options;
    if (inputs[i].chunk.replicated) {
      Tensor sum = Tensor::zeros(inputs[i].shape, options);
      for (const nn::Tensors& g : grads) {
        if (i < g.size() && g[i].defined()) ops::add_(sum, g[i].to(options.device));
      }
      out[i] = sum;
      continue;
    }
    const int dim = inputs[i].chunk.dim;
    nn::Tensors parts;
    for (size_t j = 0; j < grads.size(); ++j) {
      if (i < grads[j].size() && grads[j][i].defined()) {
        parts.push_back(grads[j][i].to(options.device));
      } else {
        Shape shape = inputs[i].shape;
        shape.at(dim) = sizes[j];
        parts.push_back(Tensor::zeros(shape, options));
      }
    }
    out[i] = parts.size() == 1 ? parts[0] : cat_on(parts, dim);
  }
  return out;
}

}  // namespace pipewright::pipeline
