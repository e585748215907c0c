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
//
// Note [Checksum]
// Every file save_safetensors writes carries a CRC-32 in its metadata, under the reserved key
// kChecksumKey ("pipewright.crc32", value "crc32:" + 8 hex digits). It covers the header as
// build_header() would write it without that key (tensor names, dtypes, shapes, offsets and
// the other metadata) followed by the whole data section, so a bit flip anywhere that still
// parses, or a data section cut short or altered, is refused on load. Files from other tools
// have no such key and load unverified (SafetensorsFile::verified is false); load_checkpoint
// (nn/serialize.h) requires it.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
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

/// The reserved metadata key of the checksum (Note [Checksum]).
inline constexpr const char* kChecksumKey = "pipewright.crc32";

/// What load_safetensors returns.
struct SafetensorsFile {
  /// In file order (by data offset: the order they were saved in), on Device::cpu(0).
  NamedTensors tensors;
  /// The "__metadata__" strings (empty when the file has none), without kChecksumKey.
  std::map<std::string, std::string> metadata;
  /// True when the file carried a checksum (Note [Checksum]) and the contents matched it.
  bool verified = false;
  /// That checksum (what save_safetensors returned), when `verified`; 0 otherwise.
  uint32_t checksum = 0;

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
/// The metadata gains kChecksumKey (Note [Checksum]).
/// Throws std::invalid_argument (before touching the disk) for an undefined tensor, a duplicate
/// name, the reserved name "__metadata__", the reserved metadata key kChecksumKey or non-UTF-8
/// text; SafetensorsError naming the path
/// and the system's reason when a file cannot be created, written, synced or renamed.
/// Durable on return: the file and its folder's entry are fsync'ed. Returns the file's
/// CRC-32 (the value kChecksumKey holds; SafetensorsFile::checksum when it is read back).
uint32_t save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file, validating everything first: the file's size, the header size
/// (at most 100 MB and within the file), the JSON (an object, no duplicate keys, entries with
/// exactly dtype, shape and data_offsets), dtypes, shapes (non-negative, no overflow),
/// data_offsets (two integers, begin <= end, inside the data section, size = numel ×
/// element size), that the ranges neither overlap nor leave gaps, and the checksum when the
/// file has one (a malformed value, or contents that do not match it: "checksum mismatch").
/// Never crashes on a corrupted file: every problem throws SafetensorsError naming the file and
/// the problem.
SafetensorsFile load_safetensors(const std::string& path);

/// load_safetensors on bytes already in memory (a file's whole contents); `name` stands for
/// the path in error messages. Throws as load_safetensors.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& name);

}  // namespace pipewright::nn
