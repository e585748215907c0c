// Fuzzes nn::parse_safetensors (the validating safetensors reader, nn/safetensors.h).
// Every input must either throw SafetensorsError naming the file, or load; a loaded file must
// hold consistent tensors and survive a save/load round trip unchanged (names, dtypes, shapes,
// bytes, metadata), verified by its checksum.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "nn/safetensors.h"

namespace {

using pipewright::Tensor;
namespace nn = pipewright::nn;
using pipewright::fuzz::check;

std::string raw(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  nn::SafetensorsFile file;
  try {
    file = nn::parse_safetensors(bytes, "input.safetensors");
  } catch (const nn::SafetensorsError& e) {
    check(std::string_view(e.what()).substr(0, 19) == "input.safetensors: ",
          std::string("error does not name the file: ") + e.what());
    check(e.path() == "input.safetensors", "SafetensorsError::path() is " + e.path());
    return 0;
  }
  uint64_t total = 0;
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : file.tensors) {
    check(t.defined() && t.device().is_cpu() && t.is_contiguous(), "tensor '" + name + "' odd");
    check(by_name.emplace(name, &t).second, "duplicate tensor '" + name + "'");
    total += t.nbytes();
  }
  check(total <= size, "tensors hold more bytes than the input has");
  check(file.metadata.count(nn::kChecksumKey) == 0, "checksum key left in the metadata");

  // Round trip through a real file: what loaded must save and load back identically.
  static const std::string path = pipewright::fuzz::scratch_path("roundtrip.safetensors");
  nn::save_safetensors(path, file.tensors, file.metadata);
  const nn::SafetensorsFile again = nn::load_safetensors(path);
  check(again.verified, "a file save_safetensors wrote is not verified");
  check(again.metadata == file.metadata, "metadata changed in the round trip");
  check(again.tensors.size() == file.tensors.size(), "tensor count changed in the round trip");
  for (const auto& [name, t] : again.tensors) {
    auto it = by_name.find(name);
    check(it != by_name.end(), "tensor '" + name + "' appeared in the round trip");
    const Tensor& before = *it->second;
    check(t.dtype() == before.dtype() && t.shape() == before.shape() && raw(t) == raw(before),
          "tensor '" + name + "' changed in the round trip");
  }
  return 0;
}
