#include "nn/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <vector>

#include "nn/safetensors.h"

namespace pipewright::nn::safetensors_detail {

namespace {

// ordered_json keeps the keys in file order, so tensors of equal offsets (empty ones) keep the
// order they were written in.
using Json = nlohmann::ordered_json;

constexpr const char* kMetadataKey = "__metadata__";

std::string offsets_str(uint64_t begin, uint64_t end) {
  std::string s = "[";  // appended piece by piece: g++ 12 warns (-Wrestrict) on "[" + string
  s += std::to_string(begin);
  s += ", ";
  s += std::to_string(end);
  s += "]";
  return s;
}

// Parses with nlohmann, rejecting duplicate keys (which a plain parse silently merges) and
// nesting deeper than a header ever needs (object -> entry -> shape array).
Json parse_json(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> keys_per_object;  // one set per open object
  std::string duplicate;
  size_t depth = 0;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (++depth > 8) throw SafetensorsError(path, "header JSON nested deeper than 8 levels");
        if (event == E::object_start) keys_per_object.emplace_back();
        break;
      case E::object_end:
      case E::array_end:
        --depth;
        if (event == E::object_end) keys_per_object.pop_back();
        break;
      case E::key:
        if (!keys_per_object.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      case E::value:
        break;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text, callback);
  } catch (const Json::exception& e) {
    throw SafetensorsError(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) {
    throw SafetensorsError(path, "duplicate key '" + duplicate + "' in the header");
  }
  return json;
}

// A JSON integer >= 0 that fits `max`, else false.
bool to_uint(const Json& value, uint64_t max, uint64_t& out) {
  if (!value.is_number_integer()) return false;  // floats such as 2.0 are not sizes
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
  } else {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    out = static_cast<uint64_t>(v);
  }
  return out <= max;
}

TensorEntry parse_entry(const std::string& path, const std::string& name, const Json& value,
                        uint64_t data_bytes) {
  const std::string where = "tensor '" + name + "': ";
  auto fail = [&](const std::string& problem) { throw SafetensorsError(path, where + problem); };
  if (!value.is_object()) fail("entry is " + value.dump() + ", expected an object");
  for (const auto& [field, ignored] : value.items()) {
    if (field != "dtype" && field != "shape" && field != "data_offsets") {
      fail("unknown field '" + field + "' (expected dtype, shape, data_offsets)");
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) fail(std::string("missing field '") + field + "'");
  }

  TensorEntry entry;
  entry.name = name;
  const Json& dtype = value.at("dtype");
  if (!dtype.is_string()) fail("dtype " + dtype.dump() + " is not a string");
  try {
    entry.dtype = dtype_from_safetensors_name(dtype.get<std::string>());
  } catch (const std::invalid_argument&) {
    fail("unsupported dtype " + dtype.dump() + " (supported: F32, F64, I64, BF16, F16)");
  }

  const Json& shape = value.at("shape");
  if (!shape.is_array()) fail("shape " + shape.dump() + " is not an array");
  std::vector<int64_t> dims;
  uint64_t numel = 1;
  for (const Json& d : shape) {
    uint64_t size = 0;
    if (!to_uint(d, std::numeric_limits<int64_t>::max(), size)) {
      fail("shape " + shape.dump() + " must hold non-negative integers");
    }
    if (__builtin_mul_overflow(numel, size, &numel)) fail("shape " + shape.dump() + " overflows");
    dims.push_back(static_cast<int64_t>(size));
  }
  uint64_t nbytes = 0;
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, element_size(entry.dtype), &nbytes)) {
    fail("shape " + shape.dump() + " overflows");
  }
  entry.shape = Shape(std::move(dims));

  const Json& offsets = value.at("data_offsets");
  const uint64_t any = std::numeric_limits<uint64_t>::max();
  if (!offsets.is_array() || offsets.size() != 2 || !to_uint(offsets[0], any, entry.begin) ||
      !to_uint(offsets[1], any, entry.end)) {
    fail("data_offsets " + offsets.dump() + " must be [begin, end], two non-negative integers");
  }
  const std::string range = "data_offsets " + offsets_str(entry.begin, entry.end);
  if (entry.begin > entry.end) fail(range + " has begin > end");
  if (entry.end > data_bytes) {
    fail(range + " end past the data section (" + std::to_string(data_bytes) + " bytes)");
  }
  if (entry.end - entry.begin != nbytes) {
    fail(range + " hold " + std::to_string(entry.end - entry.begin) + " bytes but shape " +
         entry.shape.str() + " of " + dtype.get<std::string>() + " needs " +
         std::to_string(nbytes));
  }
  return entry;
}

}  // namespace

std::string build_header(const std::vector<TensorEntry>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json json = Json::object();
  if (!metadata.empty()) json[kMetadataKey] = metadata;
  for (const TensorEntry& t : tensors) {
    if (t.name == kMetadataKey) {
      throw std::invalid_argument("safetensors: the tensor name \"__metadata__\" is reserved");
    }
    if (json.contains(t.name)) {
      throw std::invalid_argument("safetensors: duplicate tensor name '" + t.name + "'");
    }
    json[t.name] = {{"dtype", dtype_safetensors_name(t.dtype)},
                    {"shape", t.shape.dims()},
                    {"data_offsets", {t.begin, t.end}}};
  }
  std::string text;
  try {
    text = json.dump();  // strict: throws on invalid UTF-8
  } catch (const Json::exception& e) {
    throw std::invalid_argument(std::string("safetensors: a tensor name or metadata string is "
                                            "not valid UTF-8 (") + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

Header parse_header(const std::string& path, const std::string& text, uint64_t data_bytes) {
  if (text.empty() || text[0] != '{') {
    throw SafetensorsError(path, "header does not start with '{' (not a safetensors file?)");
  }
  // nlohmann's lexer reads a NUL byte as the end of the input, which would let anything after
  // one pass unread; JSON text never contains a raw NUL.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    throw SafetensorsError(path, "header has a NUL byte at offset " + std::to_string(nul) +
                                     " (JSON text cannot contain one)");
  }
  const Json json = parse_json(path, text);
  if (!json.is_object()) throw SafetensorsError(path, "header is not a JSON object");

  Header header;
  for (const auto& [key, value] : json.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) {
        throw SafetensorsError(path, "__metadata__ is " + value.dump() + ", expected an object");
      }
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          throw SafetensorsError(path, "__metadata__ '" + k + "' is " + v.dump() +
                                           ", expected a string");
        }
        header.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parse_entry(path, key, value, data_bytes));
  }

  // Sorted by range, every tensor must start where the previous one ended, and the last one
  // must end where the data section does: no overlap, no gap.
  std::stable_sort(header.tensors.begin(), header.tensors.end(),
                   [](const TensorEntry& a, const TensorEntry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : header.tensors) {
    if (t.begin < covered) {
      throw SafetensorsError(path, "tensor '" + t.name + "': data_offsets " +
                                       offsets_str(t.begin, t.end) + " overlap tensor '" +
                                       previous->name + "' " +
                                       offsets_str(previous->begin, previous->end));
    }
    if (t.begin > covered) {
      throw SafetensorsError(path, "bytes " + offsets_str(covered, t.begin) +
                                       " of the data section belong to no tensor (a gap "
                                       "before tensor '" + t.name + "')");
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != data_bytes) {
    throw SafetensorsError(path, "bytes " + offsets_str(covered, data_bytes) +
                                     " of the data section belong to no tensor (the tensors "
                                     "cover " + std::to_string(covered) + " of " +
                                     std::to_string(data_bytes) + " bytes)");
  }
  return header;
}

}  // namespace pipewright::nn::safetensors_detail
