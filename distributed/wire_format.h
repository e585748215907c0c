// The wire format of MpiTransport (mpi_transport.h): a pipeline message as bytes, and back.
//
// Plain functions without MPI, so tests, the benchmark and the fuzzer (fuzz/wire_format_fuzzer.cc)
// call them directly.
//
// Note [The wire format]
// One MPI message (MPI_BYTE, tag kMessageTag, on the replica's pipeline communicator) per
// Transport message, so MPI's non-overtaking rule is never relied upon. It starts with a
// header of int64 words, then the tensors' bytes, back to back:
//
//   [magic] [step] [K] [key_0 .. key_{K-1}] [device type] [device index] [T]
//   T × ([defined] [dtype] [rank] [dim_0 .. dim_{rank-1}])   then the defined tensors' data
//
// The key is written generically: encode_key() turns a MessageKey into K integers (arrival edge,
// micro-batch, direction, skip route or -1), and the receiver files the message under (step,
// key words) without interpreting them. A skip connection's portal keeps the receiver rule
// of the other messages (pipeline/transport.h), so receiving_stage() (mpi_transport.h) needs
// no skip layout; a key that gains fields needs only encode_key() and receiving_stage() to
// learn them, and both ranks agree because they run the same binary. `step` counts the
// Pipe's steps, so a fast neighbour's message for step k+1 waits in the inbox while step k
// finishes here. Undefined entries travel as `defined = 0` with no data. Tensors on a GPU
// cross through host memory (copied to the host at send, to the destination device named by
// the sender at recv); NcclTransport would move them device to device.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/transport.h"
#include "tensor/tensor.h"

namespace pipewright::distributed {

/// The integers that name `key` on the wire (Note [The wire format]).
std::vector<int64_t> encode_key(const pipeline::MessageKey& key);

/// Packs `tensors` for `destination` under `id` (Note [The wire format]); exposed for tests
/// and the benchmark.
std::vector<char> pack_message(const std::vector<int64_t>& id, const std::vector<Tensor>& tensors,
                               Device destination);
/// The (step, key words) a packed message is filed under. Throws std::runtime_error
/// ("MpiTransport: malformed message (...)") for a wrong magic, a header cut short or a key
/// longer than 64 words.
std::vector<int64_t> message_id(const std::vector<char>& bytes);
/// The tensors of a packed message, on the device it names. Throws std::runtime_error
/// ("MpiTransport: malformed message (...)", naming the word or the sizes) for any bytes
/// pack_message did not write: wrong magic, a header cut short, a word out of its range
/// (device type, dtype, rank up to 64, dim up to 2^40, a shape of over 2^53 elements), or
/// data that does not fill the message exactly. Reads nothing past the end. A well-formed
/// message naming a device this build lacks throws what Tensor::to throws
/// (std::invalid_argument for a GPU without --config=cuda).
std::vector<Tensor> unpack_message(const std::vector<char>& bytes);

}  // namespace pipewright::distributed
