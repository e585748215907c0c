// Fuzzes distributed::message_id and unpack_message (distributed/wire_format.h), the readers
// of every message an MPI rank receives, with every input. Each must either throw
// std::runtime_error (a malformed message), or, for unpack_message only, std::invalid_argument
// for a device this build lacks; anything else escaping is a crash. A message both accept
// must be exactly what pack_message writes for its id, tensors and destination.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "distributed/wire_format.h"
#include "fuzz/fuzz_util.h"

namespace {

namespace dist = pipewright::distributed;
using pipewright::fuzz::check;

/// The destination device the header names (Note [The wire format]: after the magic, the
/// step, K and the K key words). Called only on a message unpack_message accepted.
pipewright::Device destination(const std::vector<char>& bytes, size_t key_words) {
  int64_t words[2];
  std::memcpy(words, bytes.data() + (3 + key_words) * sizeof(int64_t), sizeof words);
  return {static_cast<pipewright::DeviceType>(words[0]), static_cast<int>(words[1])};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<char> bytes(reinterpret_cast<const char*>(data),
                                reinterpret_cast<const char*>(data) + size);
  std::vector<int64_t> id;
  try {
    id = dist::message_id(bytes);
  } catch (const std::runtime_error&) {
  }
  std::vector<pipewright::Tensor> tensors;
  try {
    tensors = dist::unpack_message(bytes);
  } catch (const std::runtime_error&) {
    return 0;
  } catch (const std::invalid_argument&) {
    return 0;
  }
  check(!id.empty(), "unpack_message accepted a message whose id message_id refused");
  for (const pipewright::Tensor& t : tensors) {
    check(!t.defined() || t.is_contiguous(), "an unpacked tensor is not contiguous");
  }
  const std::vector<char> again =
      dist::pack_message(id, tensors, destination(bytes, id.size() - 1));
  check(again == bytes, "pack_message(message_id, unpack_message) differs from the message");
  return 0;
}
