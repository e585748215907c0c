// The MPI transport's wire format (Note [The wire format], distributed/wire_format.h)
// without MPI: packing and unpacking round-trip every dtype, shape and undefined entry; the
// id is the step and the key's words; malformed messages are refused with a message.
#include <catch2/catch.hpp>

#include <cstring>

#include "distributed/mpi_transport.h"
#include "distributed/wire_format.h"

namespace pipewright::distributed {
namespace {

using pipeline::Direction;
using pipeline::MessageKey;

TEST_CASE("a message round-trips dtypes, shapes, scalars and undefined entries") {
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor b = Tensor::from_vector(std::vector<int64_t>{7, -8});
  const Tensor c = Tensor::scalar(2.5, {.dtype = DType::kFloat64});
  const Tensor strided = a.slice(1, 2);  // a view: packed from its own elements only
  const std::vector<int64_t> id = {5, 1, 3, static_cast<int64_t>(Direction::kGradient)};
  const std::vector<char> bytes = pack_message(id, {a, Tensor(), b, c, strided}, Device::cpu(1));
  CHECK(message_id(bytes) == id);
  const std::vector<Tensor> got = unpack_message(bytes);
  REQUIRE(got.size() == 5);
  CHECK(got[0].to_vector<float>() == a.to_vector<float>());
  CHECK(got[0].shape() == a.shape());
  CHECK(got[0].device() == Device::cpu(1));  // the device the sender named
  CHECK_FALSE(got[1].defined());
  CHECK(got[2].to_vector<int64_t>() == std::vector<int64_t>{7, -8});
  CHECK(got[2].dtype() == DType::kInt64);
  CHECK(got[3].dim() == 0);
  CHECK(got[3].item() == 2.5);
  CHECK(got[4].to_vector<float>() == std::vector<float>{4, 5, 6});
}

TEST_CASE("16-bit tensors travel as they are (the precision policy's messages)") {
  const Tensor a = Tensor::from_vector(std::vector<float>{1.5f, -2.25f, 65504.0f});
  const std::vector<Tensor> sent = {a.to(DType::kBFloat16), a.to(DType::kFloat16)};
  const std::vector<Tensor> got =
      unpack_message(pack_message({1, 0, 0, 0}, sent, Device::cpu(0)));
  REQUIRE(got.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(got[i].dtype() == sent[i].dtype());
    CHECK(got[i].to(DType::kFloat32).to_vector<float>() ==
          sent[i].to(DType::kFloat32).to_vector<float>());
  }
}

TEST_CASE("the key is written as its words, and names the receiving stage") {
  const MessageKey activation{2, 7, Direction::kActivation};
  const MessageKey gradient{2, 7, Direction::kGradient};
  CHECK(encode_key(activation) ==
        std::vector<int64_t>{2, 7, static_cast<int64_t>(Direction::kActivation), -1});
  CHECK(receiving_stage(activation) == 3);
  CHECK(receiving_stage(gradient) == 2);
  // A skip's portal from stage 0 to stage 3 (route 1): the activation names edge 2, the
  // gradient edge 0, so the receivers are stages 3 and 0 by the same rule.
  const MessageKey portal{2, 7, Direction::kActivation, 1};
  const MessageKey portal_grad{0, 7, Direction::kGradient, 1};
  CHECK(encode_key(portal) ==
        std::vector<int64_t>{2, 7, static_cast<int64_t>(Direction::kActivation), 1});
  CHECK(receiving_stage(portal) == 3);
  CHECK(receiving_stage(portal_grad) == 0);
}

TEST_CASE("malformed messages are refused, naming what is wrong") {
  std::vector<char> bytes = pack_message({1, 0, 0, 0}, {Tensor::zeros({4})}, Device::cpu(0));
  std::vector<char> truncated(bytes.begin(), bytes.end() - 4);
  CHECK_THROWS_WITH(unpack_message(truncated), Catch::Contains("header says"));
  std::vector<char> short_header(bytes.begin(), bytes.begin() + 12);
  CHECK_THROWS_WITH(unpack_message(short_header), Catch::Contains("header truncated"));
  std::vector<char> bad_magic = bytes;
  bad_magic[0] ^= 1;
  CHECK_THROWS_WITH(message_id(bad_magic), Catch::Contains("magic"));
  std::vector<int64_t> words(bytes.size() / sizeof(int64_t));
  std::memcpy(words.data(), bytes.data(), bytes.size());
  // magic, step, key length, 3 key words, device type and index, count, defined flag, dtype
  const size_t dtype_at = 10;
  REQUIRE(words[dtype_at] == static_cast<int64_t>(DType::kFloat32));
  words[dtype_at] = 5;
  std::vector<char> bad_dtype(bytes.size());
  std::memcpy(bad_dtype.data(), words.data(), bytes.size());
  CHECK_THROWS_WITH(unpack_message(bad_dtype), Catch::Contains("dtype 5 outside [0, 4]"));
}

// A header of int64 words: magic, step 1, no key words, cpu:0, one defined float64 tensor of
// shape `dims`, and no data.
std::vector<char> header_only(const std::vector<int64_t>& dims) {
  std::vector<char> bytes = pack_message({1}, {}, Device::cpu(0));
  std::vector<int64_t> words(bytes.size() / sizeof(int64_t));
  std::memcpy(words.data(), bytes.data(), bytes.size());
  words.back() = 1;  // the tensor count
  words.insert(words.end(), {1, static_cast<int64_t>(DType::kFloat64),
                             static_cast<int64_t>(dims.size())});
  words.insert(words.end(), dims.begin(), dims.end());
  bytes.resize(words.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return bytes;
}

TEST_CASE("shapes whose sizes overflow are refused before anything is allocated") {
  // 2^40 x 2^24 elements wrap to 0 in int64, and 2^40 x 2^21 float64s to 0 bytes in size_t:
  // both once matched a message without data.
  CHECK_THROWS_WITH(unpack_message(header_only({int64_t{1} << 40, int64_t{1} << 24})),
                    Catch::Contains("spans more than 2^53 elements"));
  CHECK_THROWS_WITH(unpack_message(header_only({int64_t{1} << 40, int64_t{1} << 21})),
                    Catch::Contains("spans more than 2^53 elements"));
  // No elements, but strides of 2^80.
  CHECK_THROWS_WITH(unpack_message(header_only({0, int64_t{1} << 40, int64_t{1} << 40})),
                    Catch::Contains("spans more than 2^53 elements"));
  // More data promised than the message holds: refused at that tensor.
  CHECK_THROWS_WITH(unpack_message(header_only({3, 5})), Catch::Contains("header says at least"));
  // An empty tensor of any span within the bound is a message like any other.
  const std::vector<Tensor> empty = unpack_message(header_only({0, int64_t{1} << 40}));
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].shape() == Shape{0, int64_t{1} << 40});
}

}  // namespace
}  // namespace pipewright::distributed
