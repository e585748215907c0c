#include "pipeline/microbatch.h"

#include <stdexcept>
#include <string>

#include "tensor/ops.h"

namespace pipewright::pipeline {
namespace {

bool replicated(const std::vector<bool>& no_chunk, size_t i) {
  return !no_chunk.empty() && no_chunk[i];
}

}  // namespace

MicroBatches scatter(const Tensors& inputs, const std::vector<bool>& no_chunk, int chunks) {
  if (chunks <= 0) {
    throw std::invalid_argument("number of chunks must be positive integer (chunks: " +
                                std::to_string(chunks) + ")");
  }
  if (inputs.empty()) throw std::invalid_argument("pipeline input is an empty tuple");
  if (!no_chunk.empty() && no_chunk.size() != inputs.size()) {
    throw std::invalid_argument("no_chunk has " + std::to_string(no_chunk.size()) +
                                " flags for " + std::to_string(inputs.size()) + " inputs");
  }
  MicroBatches out;
  int first_chunked = -1;
  std::vector<std::vector<Tensor>> pieces(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (replicated(no_chunk, i)) continue;
    const Tensor& t = inputs[i];
    if (!t.defined() || t.dim() == 0) {
      throw std::invalid_argument("pipeline input " + std::to_string(i) +
                                  (t.defined() ? " is a scalar (shape [])" : " is undefined") +
                                  ": cannot split it into micro-batches (flag it no_chunk)");
    }
    if (first_chunked < 0) {
      first_chunked = static_cast<int>(i);
      out.batch_size = t.size(0);
    } else if (t.size(0) != out.batch_size) {
      throw std::invalid_argument(
          "pipeline inputs differ in batch size (input " + std::to_string(first_chunked) + ": " +
          inputs[first_chunked].shape().str() + ", input " + std::to_string(i) + ": " +
          t.shape().str() + ")");
    }
    pieces[i] = t.chunk(chunks);
  }
  if (first_chunked < 0) {
    throw std::invalid_argument("every pipeline input is no_chunk: nothing to split");
  }
  const std::vector<Tensor>& reference = pieces[first_chunked];
  out.batches.resize(reference.size());
  for (size_t j = 0; j < reference.size(); ++j) {
    out.sizes.push_back(reference[j].size(0));
    for (size_t i = 0; i < inputs.size(); ++i) {
      out.batches[j].push_back(replicated(no_chunk, i) ? inputs[i] : pieces[i][j]);
    }
  }
  return out;
}

Tensors gather(const std::vector<Tensors>& outputs) {
  if (outputs.empty()) return {};
  const size_t n = outputs[0].size();
  Tensors gathered;
  for (size_t k = 0; k < n; ++k) {
    std::vector<Tensor> parts;
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (outputs[j].size() != n) {
        throw std::invalid_argument("micro-batch " + std::to_string(j) + " produced " +
                                    std::to_string(outputs[j].size()) +
                                    " outputs, micro-batch 0 produced " + std::to_string(n));
      }
      const Tensor& t = outputs[j][k];
      if (!t.defined() || t.dim() == 0) {
        throw std::invalid_argument("output " + std::to_string(k) + " of micro-batch " +
                                    std::to_string(j) +
                                    " cannot be concatenated on dim 0 (it is " +
                                    (t.defined() ? "a scalar" : "undefined") + ")");
      }
      parts.push_back(t);
    }
    gathered.push_back(parts.size() == 1 ? parts[0].clone() : cat(parts));
  }
  return gathered;
}

std::vector<Tensor> split_rows(const Tensor& t, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> out(sizes.size());
  if (!t.defined()) return out;
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (t.dim() == 0 || t.size(0) != total) {
    throw std::invalid_argument("cannot split a gradient of shape " + t.shape().str() +
                                " into micro-batches of " + std::to_string(total) + " rows");
  }
  int64_t start = 0;
  for (size_t j = 0; j < sizes.size(); ++j) {
    out[j] = t.slice(start, start + sizes[j]);
    start += sizes[j];
  }
  return out;
}

std::vector<InputInfo> describe_inputs(const Tensors& inputs,
                                       const std::vector<bool>& no_chunk) {
  std::vector<InputInfo> infos;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    InputInfo info;
    if (t.defined()) {
      info.shape = t.shape();
      info.options = {t.dtype(), t.device()};
      info.requires_grad = t.requires_grad();
    }
    info.replicated = replicated(no_chunk, i);
    infos.push_back(std::move(info));
  }
  return infos;
}

Tensors gather_input_grads(const std::vector<Tensors>& grads,
                               const std::vector<InputInfo>& inputs,
                               const std::vector<int64_t>& sizes) {
  Tensors out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool any = false;
    for (const Tensors& g : grads) any = any || (i < g.size() && g[i].defined());
    if (!any) continue;
    const TensorOptions& options = inputs[i].options;
    if (inputs[i].replicated) {
      Tensor sum = Tensor::zeros(inputs[i].shape, options);
      for (const Tensors& g : grads) {
        if (i < g.size() && g[i].defined()) ops::add_(sum, g[i].to(options.device));
      }
      out[i] = sum;
      continue;
    }
    std::vector<Tensor> parts;
    for (size_t j = 0; j < grads.size(); ++j) {
      if (i < grads[j].size() && grads[j][i].defined()) {
        parts.push_back(grads[j][i].to(options.device));
      } else {
        Shape shape = inputs[i].shape;
        shape.at(0) = sizes[j];
        parts.push_back(Tensor::zeros(shape, options));
      }
    }
    out[i] = parts.size() == 1 ? parts[0] : cat(parts);
  }
  return out;
}

}  // namespace pipewright::pipeline
