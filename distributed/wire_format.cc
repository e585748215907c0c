#include "distributed/wire_format.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace pipewright::distributed {
namespace {

constexpr int64_t kMagic = 0x5057'4d53'4731;  // "PWMSG1"

// Reads int64 words from the front of a packed message, checking every bound.
class Reader {
 public:
  explicit Reader(const std::vector<char>& bytes) : bytes_(bytes) {}
  int64_t next() {
    if (pos_ + sizeof(int64_t) > bytes_.size()) {
      throw std::runtime_error("MpiTransport: malformed message (header truncated at byte " +
                               std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
    }
    int64_t word;
    std::memcpy(&word, bytes_.data() + pos_, sizeof word);
    pos_ += sizeof word;
    return word;
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<char>& bytes_;
  size_t pos_ = 0;
};

int64_t checked_word(Reader& r, int64_t low, int64_t high, const char* what) {
  const int64_t v = r.next();
  if (v < low || v > high) {
    throw std::runtime_error(std::string("MpiTransport: malformed message (") + what + " " +
                             std::to_string(v) + " outside [" + std::to_string(low) + ", " +
                             std::to_string(high) + "])");
  }
  return v;
}

}  // namespace

std::vector<int64_t> encode_key(const pipeline::MessageKey& key) {
  return {key.arrival_edge, key.microbatch, static_cast<int64_t>(key.direction), key.skip};
}

std::vector<char> pack_message(const std::vector<int64_t>& id, const std::vector<Tensor>& tensors,
                               Device destination) {
  std::vector<int64_t> header = {kMagic, id.at(0), static_cast<int64_t>(id.size() - 1)};
  header.insert(header.end(), id.begin() + 1, id.end());
  header.push_back(static_cast<int64_t>(destination.type));
  header.push_back(destination.index);
  header.push_back(static_cast<int64_t>(tensors.size()));
  std::vector<Tensor> host;  // contiguous host copies of the defined tensors
  size_t payload = 0;
  for (const Tensor& t : tensors) {
    header.push_back(t.defined() ? 1 : 0);
    if (!t.defined()) continue;
    header.push_back(static_cast<int64_t>(t.dtype()));
    header.push_back(t.dim());
    for (int64_t d : t.shape().dims()) header.push_back(d);
    // Host memory is read directly (any virtual CPU device); a GPU tensor is copied to the
    // host on the calling thread's current stream first (Note [The wire format]).
    host.push_back(t.device().is_cpu() ? t.contiguous() : t.contiguous().to(Device::cpu(0)));
    payload += host.back().nbytes();
  }
  std::vector<char> bytes(header.size() * sizeof(int64_t) + payload);
  std::memcpy(bytes.data(), header.data(), header.size() * sizeof(int64_t));
  char* out = bytes.data() + header.size() * sizeof(int64_t);
  for (const Tensor& t : host) {
    if (t.nbytes() > 0) std::memcpy(out, t.raw_data(), t.nbytes());
    out += t.nbytes();
  }
  return bytes;
}

std::vector<int64_t> message_id(const std::vector<char>& bytes) {
  Reader r(bytes);
  if (r.next() != kMagic) throw std::runtime_error("MpiTransport: malformed message (magic)");
  std::vector<int64_t> id = {r.next()};
  const int64_t k = checked_word(r, 0, 64, "key length");
  for (int64_t i = 0; i < k; ++i) id.push_back(r.next());
  return id;
}

std::vector<Tensor> unpack_message(const std::vector<char>& bytes) {
  Reader r(bytes);
  if (r.next() != kMagic) throw std::runtime_error("MpiTransport: malformed message (magic)");
  r.next();  // step
  const int64_t k = checked_word(r, 0, 64, "key length");
  for (int64_t i = 0; i < k; ++i) r.next();
  Device destination;
  destination.type = static_cast<DeviceType>(checked_word(r, 0, 1, "device type"));
  destination.index = static_cast<int>(checked_word(r, 0, 1 << 20, "device index"));
  const int64_t count = checked_word(r, 0, 1 << 20, "tensor count");
  struct Entry {
    bool defined;
    DType dtype;
    Shape shape;
  };
  std::vector<Entry> entries;
  // The data the header promises is checked against the message's size entry by entry, so
  // no product can overflow: a shape spans at most 2^53 elements, counting its zero dims as
  // ones (its strides must fit as well as its element count).
  constexpr int64_t kMaxSpan = int64_t{1} << 53;
  size_t payload = 0;
  for (int64_t i = 0; i < count; ++i) {
    Entry e{checked_word(r, 0, 1, "defined flag") != 0, DType::kFloat32, Shape()};
    if (e.defined) {
      e.dtype = static_cast<DType>(
          checked_word(r, 0, static_cast<int64_t>(DType::kFloat16), "dtype"));  // the last
      const int64_t rank = checked_word(r, 0, 64, "rank");
      std::vector<int64_t> dims;
      int64_t span = 1, numel = 1;
      for (int64_t d = 0; d < rank; ++d) {
        const int64_t size = checked_word(r, 0, int64_t{1} << 40, "dim");
        if (size > 1 && span > kMaxSpan / size) {
          throw std::runtime_error("MpiTransport: malformed message (tensor " + std::to_string(i) +
                                   " spans more than 2^53 elements)");
        }
        span *= std::max<int64_t>(size, 1);
        numel *= size;
        dims.push_back(size);
      }
      e.shape = Shape(std::move(dims));
      payload += static_cast<size_t>(numel) * element_size(e.dtype);
      if (r.pos() + payload > bytes.size()) {
        throw std::runtime_error("MpiTransport: malformed message (" +
                                 std::to_string(bytes.size()) + " bytes, header says at least " +
                                 std::to_string(r.pos() + payload) + ")");
      }
    }
    entries.push_back(std::move(e));
  }
  if (r.pos() + payload != bytes.size()) {
    throw std::runtime_error("MpiTransport: malformed message (" + std::to_string(bytes.size()) +
                             " bytes, header says " + std::to_string(r.pos() + payload) + ")");
  }
  const char* in = bytes.data() + r.pos();
  std::vector<Tensor> tensors;
  for (const Entry& e : entries) {
    if (!e.defined) {
      tensors.emplace_back();
      continue;
    }
    const Device host = destination.is_cpu() ? destination : Device::cpu(0);
    Tensor t = Tensor::empty(e.shape, {e.dtype, host});
    if (t.nbytes() > 0) std::memcpy(t.raw_data(), in, t.nbytes());
    in += t.nbytes();
    tensors.push_back(host == destination ? std::move(t) : t.to(destination));
  }
  return tensors;
}

}  // namespace pipewright::distributed
