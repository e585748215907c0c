// The JSON header of a safetensors file: writing it and validating it (private to
// //nn:safetensors; users call nn/safetensors.h).
//
// Specification: https://github.com/huggingface/safetensors#format
//
//   +----------------+---------------------------------+--------------------------------+
//   | N (8 bytes,    | N bytes of UTF-8 JSON, starting | data section: raw little-endian |
//   | little-endian  | with '{', possibly padded with  | row-major tensor bytes          |
//   | unsigned)      | trailing spaces                 |                                 |
//   +----------------+---------------------------------+--------------------------------+
//
//   {"__metadata__": {"format": "pt"},                         optional, string -> string
//    "0.weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
//    "0.bias":   {"dtype": "F32", "shape": [3],    "data_offsets": [24, 36]}}
//
// data_offsets are [begin, end) in bytes, relative to the start of the data section. The
// tensors' ranges must not overlap and must cover the data section exactly (no holes: a file
// cannot hide other content).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace pipewright::nn::safetensors_detail {

/// Headers larger than this are rejected before reading them (the reference implementation's
/// limit, 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorEntry> tensors;  // ordered by data offset (the order they were written in)
  std::map<std::string, std::string> metadata;
};

/// The header JSON for tensors of the given names, dtypes and shapes laid out back to back
/// in this order, padded with spaces to a multiple of 8 bytes (so the data section starts
/// 8-byte aligned). Throws std::invalid_argument for a duplicate name, the reserved name
/// "__metadata__", or text that is not valid UTF-8.
std::string build_header(const std::vector<TensorEntry>& tensors,
                         const std::map<std::string, std::string>& metadata);

/// Parses and validates `json` (the N header bytes) for a data section of `data_bytes` bytes.
/// Throws SafetensorsError(path, problem) for anything the specification forbids: not a JSON
/// object, duplicate keys, malformed entries, unknown dtypes, bad shapes or offsets,
/// overlapping ranges or bytes covered by no tensor.
Header parse_header(const std::string& path, const std::string& json, uint64_t data_bytes);

}  // namespace pipewright::nn::safetensors_detail
