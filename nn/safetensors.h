// safetensors: saving and loading named tensors in Hugging Face's safetensors format
// (https://github.com/huggingface/safetensors#format), the format of model state dicts and
// training checkpoints (see nn/serialize.h for Module and Optimizer helpers).
//
//   nn::save_safetensors("model.safetensors", model.state_dict(), {{"epoch", "3"}});
//   nn::SafetensorsFile file = nn::load_safetensors("model.safetensors");
//   model.load_state_dict(file.tensors);
//
// Layout: 8-byte little-endian header size N, N bytes of JSON describing each tensor's dtype,
// shape and byte range, then the raw little-endian, row-major data (nn/safetensors_header.h
// has the picture). Supported dtypes: F32, F64, I64 (pipewright's DTypes).
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace pipewright::nn {

// The same alias as nn/module.h declares (redeclaring an alias of the same type is legal C++),
// so the file format does not depend on Module.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// A file that cannot be read or written, or whose contents break the specification. what()
/// is "<path>: <problem>", e.g. "model.safetensors: tensor '0.weight': data_offsets [0, 4096]
/// end past the data section (2048 bytes)".
class SafetensorsError : public std::runtime_error {
 public:
  SafetensorsError(const std::string& path, const std::string& problem)
      : std::runtime_error(path + ": " + problem), path_(path) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// What load_safetensors returns.
struct SafetensorsFile {
  /// In file order (by data offset: the order they were saved in), on Device::cpu(0).
  NamedTensors tensors;
  /// The "__metadata__" strings (empty when the file has none).
  std::map<std::string, std::string> metadata;

  /// The tensor named `name`. Throws std::out_of_range naming it.
  const Tensor& at(const std::string& name) const;
};

/// Writes `tensors` (any devices, dtypes F32/F64/I64, any strides: each is copied to the CPU
/// and made contiguous one at a time) and optional string metadata to `path`, in the order
/// given. The header is padded with spaces to a multiple of 8 bytes, so every tensor's data
/// starts 8-byte aligned when the dtypes are 8 bytes wide.
///
/// Atomic: the bytes go to "<path>.tmp.<pid>", which is fsync'ed and then renamed over
/// `path`; a failed save removes its temporary file and leaves an existing `path` untouched.
/// Throws std::invalid_argument (before touching the disk) for an undefined tensor, a duplicate
/// name, the reserved name "__metadata__" or non-UTF-8 text; SafetensorsError naming the path
/// and the system's reason when a file cannot be created, written, synced or renamed.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file, validating everything first: the file's size, the header size
/// (at most 100 MB and within the file), the JSON (an object, no duplicate keys, entries with
/// exactly dtype, shape and data_offsets), dtypes, shapes (non-negative, no overflow),
/// data_offsets (two integers, begin <= end, inside the data section, size = numel ×
/// element size), and that the ranges neither overlap nor leave gaps. Never crashes on a
/// corrupted file: every problem throws SafetensorsError naming the file and the problem.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace pipewright::nn
